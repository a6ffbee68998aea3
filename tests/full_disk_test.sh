#!/usr/bin/env bash
# A real full disk, not /dev/full: a 256 KiB tmpfs mounted in a private mount namespace (unshare -m;
# root, or a user namespace where the kernel allows one). On it, `mha export` (the exporter's writer,
# as the app's Export dialog uses) and `mha compute --out` (write_file_atomic: scenario saves and the
# app's autosave) must fail with "No space left on device", exit 2, leave no temp file, and keep the
# file they were replacing byte for byte. Then the same with a folder the user may not write
# (EACCES) and with the file system remounted read-only (EROFS).
#   bash tests/full_disk_test.sh build/mha assets/presets/cat_sat_mat.json
# Exits 77 (ctest: skipped) with the reason when no tmpfs can be mounted here.
set -uo pipefail
mha=$(realpath "$1")
scenario=$(realpath "$2")

if [[ "${MHA_IN_NAMESPACE:-}" != 1 ]]; then
  for how in "-m" "-rm"; do
    if unshare $how true 2>/dev/null; then
      [[ $how == -rm ]] && export MHA_USERNS=1
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

# A folder this user may not write (EACCES): the run inside it stays as it was. Root writes
# anywhere, so as root the command runs as nobody (setpriv); in a user namespace it cannot, and
# this part is skipped with the reason.
mkdir "$disk/locked"
"$mha" compute --scenario "$scenario" --out "$disk/locked/run" >/dev/null || fail "compute into locked/, with room"
cp "$disk/locked/run/output.npy" /tmp/full_disk_output.$$
chmod 555 "$disk/locked"
as_user=()
if [[ $(id -u) == 0 ]]; then
  if setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null && [[ -z "${MHA_USERNS:-}" ]]; then
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  else
    echo "skipped: EACCES (root here, and it cannot run the command as another user)"
    as_user=(skip)
  fi
fi
if [[ "${as_user[0]:-}" != skip ]]; then
  out=$("${as_user[@]}" "$mha" compute --scenario "$scenario" --out "$disk/locked/run" 2>&1)
  rc=$?
  [[ $rc == 2 && $out == *"Permission denied"* ]] || fail "compute --out in an unwritable folder: rc=$rc: $out"
  cmp -s "$disk/locked/run/output.npy" /tmp/full_disk_output.$$ || fail "EACCES: the earlier run was damaged"
  echo "ok: compute --out in an unwritable folder: ${out%%$'\n'*}"
fi
chmod 755 "$disk/locked"

# A read-only file system (EROFS): every write refused, every file kept.
mount -o remount,ro "$disk" || fail "cannot remount the tmpfs read-only"
for cmd in "export --scenario $scenario --stage attn_weights --format csv --out $disk/weights.csv" \
  "compute --scenario $scenario --out $disk/run"; do
  out=$("$mha" $cmd 2>&1)
  rc=$?
  [[ $rc == 2 && $out == *"Read-only file system"* ]] || fail "mha $cmd on a read-only disk: rc=$rc: $out"
  echo "ok: ${cmd%% *} on a read-only file system: ${out%%$'\n'*}"
done
cmp -s "$disk/locked/run/output.npy" /tmp/full_disk_output.$$ || fail "EROFS: a run was damaged"
rm -f /tmp/full_disk_output.$$
umount "$disk"
rmdir "$disk"
echo "full disk, unwritable folder, read-only file system: every write refused cleanly, nothing damaged"
