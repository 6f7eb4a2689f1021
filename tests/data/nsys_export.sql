-- A small Nsight Systems SQLite export, written by hand to the schema `nsys export --type sqlite`
-- produces (tables StringIds, CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
-- CUPTI_ACTIVITY_KIND_MEMCPY, NVTX_EVENTS; only the columns fathom reads). One decode step of
-- two layers: NVTX ranges "step" > "layer.0" / "layer.1" on thread 100, a GEMM, an attention
-- kernel and an NCCL all-reduce per layer, and a host-to-device copy.
CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES
  (1, 'sm90_xmma_gemm_e4m3f16_e4m3f32_f32_tn_n_tilesize128x128x128'),
  (2, 'flash_fwd_splitkv_kernel'),
  (3, 'ncclDevKernel_AllReduce_Sum_bf16_RING_LL'),
  (4, 'cudaLaunchKernel'),
  (5, 'layer.1');
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL, shortName INTEGER, mangledName INTEGER,
  gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
  (1000, 1040, 0, 1, 7, 11, 1, 1, 1, 1, 132, 1, 1, 384, 1, 1),
  (1050, 1070, 0, 1, 7, 12, 1, 2, 2, 2, 64, 8, 1, 128, 1, 1),
  (1080, 1110, 0, 1, 7, 13, 1, 3, 3, 3, 16, 1, 1, 512, 1, 1),
  (1120, 1160, 0, 1, 7, 14, 1, 1, 1, 1, 132, 1, 1, 384, 1, 1),
  (1170, 1190, 0, 1, 7, 15, 1, 2, 2, 2, 64, 8, 1, 128, 1, 1),
  (1200, 1230, 0, 1, 7, 16, 1, 3, 3, 3, 16, 1, 1, 512, 1, 1);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES
  (900, 905, 1, 100, 11, 4, 0, NULL), (906, 910, 1, 100, 12, 4, 0, NULL), (911, 915, 1, 100, 13, 4, 0, NULL),
  (921, 925, 1, 100, 14, 4, 0, NULL), (926, 930, 1, 100, 15, 4, 0, NULL), (931, 935, 1, 100, 16, 4, 0, NULL),
  (850, 860, 1, 100, 17, 4, 0, NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY(start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER,
  copyKind INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (870, 890, 0, 1, 7, 17, 1, 1048576, 1);
CREATE TABLE NVTX_EVENTS(start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER);
INSERT INTO NVTX_EVENTS VALUES
  (895, 940, 59, NULL, NULL, NULL, 'step', 100, NULL, NULL, 0),
  (899, 916, 59, NULL, NULL, NULL, 'layer.0', 100, NULL, NULL, 0),
  (920, 936, 59, NULL, NULL, NULL, NULL, 100, NULL, 5, 0);
