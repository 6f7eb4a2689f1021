// The Catch2 main of every test binary. Temporary files go under the build tree
// (FATHOM_TEST_TMPDIR), so that test suites of two builds running at once never share them.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>

int main(int argc, char** argv) {
  std::filesystem::create_directories(FATHOM_TEST_TMPDIR);
  setenv("TMPDIR", FATHOM_TEST_TMPDIR, 1);
  return Catch::Session().run(argc, argv);
}
