# Sourced by .ci/wine-tests: the Debian trixie chroot with Wine 10 and the
# headless Wine environment the Windows tests run in.
#
# Wine comes from Debian trixie's wine64 inside a debootstrap chroot, built
# from Debian's registry only (bookworm's Wine 8 cannot start Go >= 1.24
# binaries: they need bcryptprimitives.dll's ProcessPrng). The host's apt
# sources are never changed: trixie exists only inside the chroot.
#
# Needs: ROOT (the chroot dir), OUT (a scratch dir, bind-mounted at the same
# path inside the chroot). Defines W (run in the chroot with Wine's env),
# wine_root_ensure, wine_mount, wine_unmount.

WINE_STAMP="debootstrap minbase trixie + wine64 (no recommends), v1"

wine_mirror() { # the Debian mirror the host's own apt sources name
  local m
  m=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -1)
  [ -n "$m" ] || m=$(awk '$1 == "deb" && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  echo "${m:-http://deb.debian.org/debian}"
}

mounts_below() { awk -v r="$ROOT/" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo | sort -r; }
wine_unmount() { # every mount below ROOT, deepest first
  mounts_below | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
}

wine_root_ensure() { # build the chroot unless its stamp says it is there
  if [ "$(cat "$ROOT/.roomrelay-wine" 2>/dev/null)" = "$WINE_STAMP" ]; then
    echo "chroot $ROOT present ($WINE_STAMP)"
    return 0
  fi
  echo "building $ROOT: debootstrap trixie minbase, then wine64"
  wine_unmount
  # rm -rf --one-file-system does not stop at bind mounts of the same
  # filesystem: never remove while anything is mounted below ROOT.
  if [ -n "$(mounts_below)" ]; then echo "mounts left under $ROOT: $(mounts_below)" >&2; return 1; fi
  rm -rf --one-file-system "$ROOT"
  mkdir -p "$(dirname "$ROOT")"
  command -v debootstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq debootstrap >/dev/null; }
  debootstrap --variant=minbase trixie "$ROOT" "$(wine_mirror)" > "$OUT/debootstrap.log" 2>&1 \
    || { tail -20 "$OUT/debootstrap.log"; echo "debootstrap failed" >&2; return 1; }
  chroot "$ROOT" apt-get update -qq
  chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wine64 \
    > "$OUT/apt-wine.log" 2>&1 || { tail -20 "$OUT/apt-wine.log"; echo "apt-get install wine64 failed" >&2; return 1; }
  chroot "$ROOT" apt-get clean
  echo "$WINE_STAMP" > "$ROOT/.roomrelay-wine"
}

wine_mount() {
  mkdir -p "$ROOT$OUT"
  mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
  mountpoint -q "$ROOT/sys" || mount -t sysfs sys "$ROOT/sys"
  mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
  mountpoint -q "$ROOT$OUT" || mount --bind "$OUT" "$ROOT$OUT" # same path inside and out
  # Wine's crypt32 (Go's TLS verification on Windows) reads the Unix trust
  # store; the host's may hold a CA the chroot's lacks (an egress proxy's).
  if [ -d /etc/ssl/certs ]; then
    mkdir -p "$ROOT/etc/ssl/certs"
    mountpoint -q "$ROOT/etc/ssl/certs" || mount --bind -o ro /etc/ssl/certs "$ROOT/etc/ssl/certs"
  fi
  mkdir -p "$OUT/xdg" && chmod 700 "$OUT/xdg"
  # W: a command in the chroot with a headless Wine environment and nothing
  # from the host's: no DISPLAY (every program here is a console program),
  # mscoree/mshtml disabled so no Mono or Gecko install is attempted,
  # XDG_RUNTIME_DIR set to quiet the Wayland probe. It execs all the way,
  # so a PID taken with $! is the Wine process itself (SIGINT = Ctrl+C).
  cat > "$OUT/w" <<EOW
#!/bin/sh
umask 077 # Wine derives a file's ACL from its Unix mode and keeps no DACL set later
exec chroot "$ROOT" /usr/bin/env -i PATH=/usr/lib/wine:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \\
  WINEPREFIX="\${WINEPREFIX:-$OUT/prefix}" WINEDEBUG="\${WINEDEBUG:--all}" WINEDLLOVERRIDES="mscoree,mshtml=" \\
  XDG_RUNTIME_DIR="$OUT/xdg" "\$@"
EOW
  chmod +x "$OUT/w"
}

W() { "$OUT/w" "$@"; }
