#!/usr/bin/env bash
# Build the one-folder Lumos app with PyInstaller: build/dist/lumos/lumos (+ Lumos.app on macOS).
#
#   packaging/build.sh            # build with the current Python (.venv if there is one)
#   packaging/build.sh --venv     # first create a clean build/venv with Lumos and PyInstaller
#   packaging/build.sh --smoke    # afterwards, run the built app offscreen: --demo --screenshot
#
# PYTHON=/path/to/python overrides the interpreter. See packaging/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

make_venv=0
smoke=0
for arg in "$@"; do
  case "$arg" in
    --venv) make_venv=1 ;;
    --smoke) smoke=1 ;;
    *) echo "build.sh: unknown option $arg (use --venv, --smoke)" >&2; exit 2 ;;
  esac
done

if [[ $make_venv == 1 ]]; then
  python3 -m venv build/venv
  build/venv/bin/python -m pip install --quiet --upgrade pip
  build/venv/bin/python -m pip install --quiet -e '.[package]'
  PYTHON=build/venv/bin/python
fi
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import PyInstaller" 2>/dev/null; then
  echo "build.sh: PyInstaller is not installed for $PYTHON." >&2
  echo "  install it with: $PYTHON -m pip install -e '.[package]'   (or run build.sh --venv)" >&2
  exit 2
fi

start=$(date +%s)
"$PYTHON" -m PyInstaller packaging/lumos.spec --noconfirm --distpath build/dist --workpath build/work
echo "build.sh: built build/dist/lumos in $(($(date +%s) - start)) s, $(du -sh build/dist/lumos | cut -f1)"

if [[ $smoke == 1 ]]; then
  QT_QPA_PLATFORM=offscreen build/dist/lumos/lumos --demo --screenshot build/smoke.png
  echo "build.sh: the built app rendered build/smoke.png"
fi
