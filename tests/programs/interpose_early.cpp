// interpose_early — linked against libinterpose_early.so, whose constructor used the driver before
// libcoloc.so's constructor ran. Prints those results as one JSON line.
#include <cstdio>

extern "C" const int* coloc_early_results();

int main() {
  const int* r = coloc_early_results();
  std::printf("{\"init\":%d,\"retain\":%d,\"set_current\":%d,\"alloc\":%d}\n", r[0], r[1], r[2], r[3]);
  return 0;
}
