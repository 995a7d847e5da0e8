"""The check every node-side folder nvdeploy writes in, or talks through, passes before use: the run lock's folder,
the parent of the batch's temp folder, an MPS pipe folder. A POSIX sh (and bash) function, spliced into the
batch script and the MPS collector's helper; no imports, so the simulator's fake tools read it from a bare copy
of the package.

``nvd_safe PATH`` succeeds when every folder from ``/`` down to PATH is a real folder (not a symbolic link),
owned by root or by the batch's user, and writable by nobody else unless it is sticky and root-owned (``/tmp``,
Debian's ``/run/lock``): in such a folder, or one only its owner may write, no other user can create, rename or
replace what the batch makes there. Otherwise it fails with ``nvd_unsafe`` naming the first folder that is not
so, its owner and its mode. A path that is not absolute, or goes through ``..``, fails too.

Cost: one ``ls -ldnq`` for the whole path (its operands are prefixes of one another, so ls's name order in the C
locale is the path's order, and ``-q`` keeps each entry on one line), plus one ``ls`` more for the owner's name
when the check fails; the user id comes from ``/proc/$$/status`` with the shell's ``read`` (``id -u`` without
/proc).
"""

from __future__ import annotations

# Where a node's system Python is (RHEL 8 has only platform-python): a fixed path, never $PATH's python3, which may
# be a user's virtual environment, a pyenv shim, or a folder another user can write. Both the batch runner and the
# NVML probe start it from here, isolated (-I).
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/libexec/platform-python")

# The marker line of a batch refused for an unsafe folder: printed first, then the end marker; nothing ran.
UNSAFE_MARKER = "__NVD_UNSAFE__"

SAFE_DIR_SH = r"""
nvd_uid=
nvd_myuid() {
  while IFS= read -r nvd_sl; do
    case $nvd_sl in Uid:*) set -f; set -- $nvd_sl; set +f; nvd_uid=$3; return 0 ;; esac
  done 2>/dev/null </proc/$$/status
  nvd_uid=$(id -u 2>/dev/null)
}
nvd_one() {
  # One line of ls -ldn: mode, links, owner uid, group, size, date (three fields in the C locale), name.
  nvd_sm=$1 nvd_so=$3 nvd_swhy=
  case $nvd_sm in
    d*) ;;
    l*) nvd_swhy="is a symbolic link"; return 1 ;;
    *) nvd_swhy="is not a folder"; return 1 ;;
  esac
  if [ "$nvd_so" != 0 ] && [ "$nvd_so" != "$nvd_uid" ]; then nvd_swhy="is owned by another user"; return 1; fi
  case $nvd_sm in
    d????w*|d???????w*)
      case $nvd_so$nvd_sm in 0d????????[tT]*) ;; *) nvd_swhy="is writable by other users"; return 1 ;; esac ;;
  esac
  return 0
}
nvd_safe() {
  nvd_unsafe=
  nvd_sq=$1
  case $nvd_sq in /*) ;; *) nvd_unsafe="$nvd_sq is not an absolute path"; return 1 ;; esac
  nvd_sr=${nvd_sq#/} nvd_sa=
  set -- /
  while [ -n "$nvd_sr" ]; do
    nvd_sc=${nvd_sr%%/*}
    case $nvd_sr in */*) nvd_sr=${nvd_sr#*/} ;; *) nvd_sr= ;; esac
    case $nvd_sc in
      ''|.) continue ;;
      ..) nvd_unsafe="$nvd_sq goes through .."; return 1 ;;
    esac
    nvd_sa=$nvd_sa/$nvd_sc
    set -- "$@" "$nvd_sa"
  done
  [ -n "$nvd_uid" ] || nvd_myuid
  nvd_sls=$(LC_ALL=C ls -ldnq -- "$@" 2>/dev/null)
  nvd_sk=0 nvd_swhy=
  set -f; nvd_sifs=$IFS; IFS='
'
  for nvd_sl in $nvd_sls; do
    IFS=$nvd_sifs
    nvd_sk=$((nvd_sk + 1))
    nvd_one $nvd_sl || break
  done
  IFS=$nvd_sifs; set +f
  if [ -z "$nvd_swhy" ]; then
    [ "$nvd_sk" = $# ] && return 0
    nvd_unsafe="$nvd_sq cannot be checked (missing, or a folder above it cannot be read)"
    return 1
  fi
  eval "nvd_sa=\${$nvd_sk}"
  nvd_sl=$(LC_ALL=C ls -ldq -- "$nvd_sa" 2>/dev/null)
  set -f; set -- $nvd_sl; set +f
  nvd_unsafe="$nvd_sa $nvd_swhy (owner ${3:-?}, uid $nvd_so; mode $nvd_sm)"
  [ "$nvd_sa" = "$nvd_sq" ] || nvd_unsafe="$nvd_unsafe, on the path of $nvd_sq"
  return 1
}
"""
