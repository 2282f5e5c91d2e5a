#!/usr/bin/env bash
# Add the built Lumos to the Linux desktop for the current user: the .desktop entry (Exec pointing at
# the built app) and the icon at every size in the hicolor theme. Nothing outside $XDG_DATA_HOME
# (default ~/.local/share) is touched; remove those files to uninstall.
#
#   packaging/install_linux.sh [APP_FOLDER]     # default: build/dist/lumos
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
app_dir="$(cd "${1:-$repo/build/dist/lumos}" && pwd)"
exe="$app_dir/lumos"
if [[ ! -x "$exe" ]]; then
  echo "install_linux.sh: no executable $exe (build it first: packaging/build.sh)" >&2
  exit 2
fi
case "$exe" in
  *[\"\`\$\\\|\&]*)
    echo "install_linux.sh: move the app to a path without \" \` \$ \\ | or & (Exec= cannot hold them as is)" >&2
    exit 2
    ;;
esac
data="${XDG_DATA_HOME:-$HOME/.local/share}"
icons="$repo/resources/icons"

for png in "$icons"/lumos-*.png; do
  size="$(basename "$png" .png)"
  size="${size#lumos-}"
  install -D -m 644 "$png" "$data/icons/hicolor/${size}x${size}/apps/lumos.png"
done
install -D -m 644 "$icons/lumos.svg" "$data/icons/hicolor/scalable/apps/lumos.svg"

mkdir -p "$data/applications"
# Quote the path as the Desktop Entry spec asks (it may contain spaces).
sed -e "s|^Exec=lumos |Exec=\"$exe\" |" -e "s|^TryExec=lumos$|TryExec=$exe|" \
  "$repo/packaging/lumos.desktop" >"$data/applications/lumos.desktop"
chmod 644 "$data/applications/lumos.desktop"

# Refresh the caches where the tools exist; desktops also notice new files on their own.
command -v update-desktop-database >/dev/null && update-desktop-database -q "$data/applications" || true
command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$data/icons/hicolor" || true
echo "install_linux.sh: added $data/applications/lumos.desktop and icons for $exe"

# Can the app open a window on this desktop? `lumos doctor` checks Qt's platform plugin and its
# system libraries (exit 3 when it cannot) and says what to install.
status=0
report="$("$exe" doctor 2>&1)" || status=$?
if [[ $status == 0 ]]; then
  echo "install_linux.sh: checked: lumos can open a window here"
elif [[ $status == 3 ]]; then
  echo "install_linux.sh: installed, but lumos cannot open a window on this desktop yet:" >&2
  printf '%s\n' "$report" | sed -n '/^Qt will try/,/^cache /p' | sed '$d' >&2
else
  echo "install_linux.sh: warning: '$exe doctor' failed (exit $status); run it to see why" >&2
fi
