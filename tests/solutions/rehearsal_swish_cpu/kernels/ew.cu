// Host code only: the CPU kernel of a rehearsal (tests/test_rehearsal.py), where the CPU stands in
// for the GPU so that CI runs an evaluation end to end. Not a pattern for real solutions.
#include <math.h>
extern "C" void swish_host(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = x[i] / (1.f + expf(-x[i]));
}
