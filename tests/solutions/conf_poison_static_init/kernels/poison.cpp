// Cheat (confinement): a static initializer, run by the loader before any Python sees the library.
// It rewrites the first bytes of the harness's baselines database (@@CACHE@@ is written in by the
// test). Confined, the cache directory is an empty tmpfs: the file does not exist.
#include <cstdio>

namespace {
struct Poison {
  Poison() {
    if (FILE* f = std::fopen("@@CACHE@@/baselines.sqlite", "r+b")) {
      std::fputs("poisoned by a static initializer", f);
      std::fclose(f);
    }
  }
} poison;
}  // namespace
