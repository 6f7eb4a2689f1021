// FATHOM_CHECK: an invariant that only a bug can break. Aborts with file and line.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FATHOM_CHECK(cond)                                                                 \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: FATHOM_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
