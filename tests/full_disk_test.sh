#!/usr/bin/env bash
# A real full disk, not /dev/full: a 256 KiB tmpfs mounted in a private mount namespace (unshare -m;
# root, or a user namespace where the kernel allows one). On it, `mha export` (the exporter's writer,
# as the app's Export dialog uses) and `mha compute --out` (write_file_atomic: scenario saves and the
# app's autosave) must fail with "No space left on device", exit 2, leave no temp file, and keep the
# file they were replacing byte for byte.
#   bash tests/full_disk_test.sh build/mha assets/presets/cat_sat_mat.json
# Exits 77 (ctest: skipped) with the reason when no tmpfs can be mounted here.
set -uo pipefail
mha=$(realpath "$1")
scenario=$(realpath "$2")

if [[ "${MHA_IN_NAMESPACE:-}" != 1 ]]; then
  for how in "-m" "-rm"; do
    if unshare $how true 2>/dev/null; then
      MHA_IN_NAMESPACE=1 exec unshare $how --propagation private bash "$0" "$@"
    fi
  done
  echo "SKIPPED: cannot make a private mount namespace here (unshare -m / -rm refused)"
  exit 77
fi

disk=$(mktemp -d)
if ! mount -t tmpfs -o size=256k tmpfs "$disk" 2>/tmp/full_disk_mount.$$; then
  echo "SKIPPED: cannot mount a tmpfs: $(cat /tmp/full_disk_mount.$$)"
  rm -f /tmp/full_disk_mount.$$
  exit 77
fi
rm -f /tmp/full_disk_mount.$$
fail() {
  echo "FAIL: $*"
  exit 1
}

# Files that fit, written while there is room.
"$mha" export --scenario "$scenario" --stage attn_weights --format csv --out "$disk/weights.csv" >/dev/null ||
  fail "the first export, with room on the disk"
"$mha" compute --scenario "$scenario" --out "$disk/run" >/dev/null || fail "the first compute --out, with room"
cp "$disk/weights.csv" /tmp/full_disk_weights.$$
cp "$disk/run/output.npy" /tmp/full_disk_output.$$

# Fill the disk.
head -c 1M /dev/zero >"$disk/filler" 2>/dev/null
[[ $(df --output=avail "$disk" | tail -1) -le 4 ]] || fail "the tmpfs is not full: $(df -k "$disk" | tail -1)"

check_refused() {  # what, expected file left untouched or absent, command...
  local what=$1 keep=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  [[ $rc == 2 ]] || fail "$what on a full disk exited $rc, not 2: $out"
  [[ $out == *"No space left on device"* ]] || fail "$what: the message does not say the disk is full: $out"
  [[ -z $(find "$disk" -name '*.tmp') ]] || fail "$what left a temp file: $(find "$disk" -name '*.tmp')"
  echo "ok: $what: ${out%%$'\n'*}"
}

check_refused "export over an existing CSV" weights.csv \
  "$mha" export --scenario "$scenario" --stage attn_weights --format csv --out "$disk/weights.csv"
cmp -s "$disk/weights.csv" /tmp/full_disk_weights.$$ || fail "the CSV being replaced was damaged"
check_refused "export of a new PNG" - \
  "$mha" export --scenario "$scenario" --stage attn_weights --out "$disk/new.png"
[[ ! -e "$disk/new.png" ]] || fail "a partial new.png was left"
check_refused "compute --out over an existing run" run/output.npy \
  "$mha" compute --scenario "$scenario" --out "$disk/run"
cmp -s "$disk/run/output.npy" /tmp/full_disk_output.$$ || fail "output.npy being replaced was damaged"
rm -f /tmp/full_disk_weights.$$ /tmp/full_disk_output.$$

# Room again: the same commands work.
rm "$disk/filler"
"$mha" export --scenario "$scenario" --stage attn_weights --out "$disk/new.png" >/dev/null ||
  fail "export after space was freed"
umount "$disk"
rmdir "$disk"
echo "full disk: every write refused cleanly, nothing damaged"
