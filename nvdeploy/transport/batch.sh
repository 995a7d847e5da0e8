# shellcheck shell=sh
# shellcheck disable=SC2154  # d and the nvd_* settings are set by the header (below); nvd_k_* by eval
# The node side of a batch: the fixed part of the POSIX sh script that nvdeploy/transport/batch.py sends to a node
# (see its docstring for the whole lifecycle). batch.py adds what varies per batch: a header that sets the variables
# below and defines nvd_safe (transport/node_paths.py) and nvd_refuse, the commands themselves, their waits and
# frames. This file is shipped as package data, read once per controller process, and checked by shellcheck in CI.
# A node with a system Python runs the batch in batch_runner.py instead, started after the session part below;
# this script then stops there. The rest is the batch for a node without one.
#
# Set by the header:
#   d                 the batch's private temp folder (mktemp -d)
#   nvd_grace_ticks   tenths of a second between TERM and KILL for what the session left behind
#   nvd_period        the heartbeat clock's period in seconds; 0: no heartbeat (the watcher waits for EOF only)
#   nvd_endm          the end marker line
#   nvd_run           the run id written to the lock's holder info
#   nvd_lock_bases    the system lock folders to try, first found wins (fixed words, no blanks)
#   nvd_root_lock     root's lock folder when the system lock folder has no root-made nvdeploy folder
#   nvd_uid           the user id (root may remove anyone's stale holder info)
# Sections start with "# @part NAME" lines; batch.py places each where its order needs it.

# @part isolate
# Nothing the batch starts may come from a folder its caller happened to be in: root started from /tmp (local
# transport) or srun's inherited working folder would otherwise run a planted python3 module or a program named by a
# relative PATH entry. The batch works from / and drops every PATH entry that is not absolute (an empty one, ".").
cd / || { echo 'nvdeploy: cannot change to /' >&2; exit 97; }
nvd_x='' nvd_sifs=$IFS
set -f; IFS=:
for nvd_e in ${PATH:-}; do case $nvd_e in /*) nvd_x=${nvd_x:+$nvd_x:}$nvd_e ;; esac; done
IFS=$nvd_sifs; set +f
PATH=${nvd_x:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}; export PATH

# @part session
# Which session this is, in a function: the script's positional parameters are its commands (set by batch.py).
nvd_session() {
  nvd_sid='' nvd_pg='' nvd_ours=''
  # shellcheck disable=SC2086  # splitting /proc/PID/stat's fields into words is the point
  IFS= read -r nvd_l 2>/dev/null </proc/$$/stat && { nvd_l=${nvd_l##*) }; set -- $nvd_l; nvd_pg=$3; nvd_sid=$4; }
  # Sweep only a session that is this batch's own: we lead it (local transport), or our parent does and is the
  # login shell sshd started for this channel. Never a session we were merely started from.
  if [ -n "$nvd_sid" ] && [ "$nvd_sid" = "$$" ]; then nvd_ours=1
  elif [ -n "$nvd_sid" ] && [ "$nvd_sid" = "$PPID" ] && IFS= read -r nvd_l 2>/dev/null </proc/$PPID/stat; then
    nvd_l=${nvd_l##*) }
    # shellcheck disable=SC2086  # the same split of the parent's stat
    set -- $nvd_l; nvd_gp=$2
    IFS= read -r nvd_c 2>/dev/null </proc/"$nvd_gp"/comm && case $nvd_c in sshd*) nvd_ours=1 ;; esac
  fi
}
nvd_session
nvd_only_tools=

# @part prelude
nvd_nl='
'
nvd_sweep() {
  # Sends $nvd_sig (0: just count) to every process of our session but the pids in $nvd_spare and, when
  # $nvd_only_tools is set, but our own process group (the shells and cappers; each tool runs under timeout(1),
  # which gives it a group of its own). nvd_n: how many were signalled. One grep reads every /proc/PID/stat (the
  # shell's read builtin takes a byte per system call: ~80 per process on the node, for every process); the
  # shell checks each hit again from the comm's last ")", which a comm cannot fake. The grep itself has ended
  # when its hits are read, so a kill of its pid fails and is not counted.
  nvd_n=0
  [ -n "$nvd_ours" ] || return 0
  nvd_hits=$(grep -s -h -e ") [A-Za-z] [0-9]* [0-9]* $nvd_sid " /proc/[0-9]*/stat)
  [ -n "$nvd_hits" ] || return 0
  set -f; nvd_ifs=$IFS; IFS=$nvd_nl
  for nvd_l in $nvd_hits; do
    IFS=$nvd_ifs
    nvd_p=${nvd_l%% *}
    case " $nvd_spare " in *" $nvd_p "*) continue ;; esac
    nvd_l=${nvd_l##*) }
    # shellcheck disable=SC2086  # the same split of each hit
    set -- $nvd_l
    [ "$4" = "$nvd_sid" ] || continue
    case $1 in Z|X) continue ;; esac
    [ -n "$nvd_only_tools" ] && [ "$3" = "$nvd_pg" ] && continue
    kill -"$nvd_sig" "$nvd_p" 2>/dev/null && nvd_n=$((nvd_n + 1))
  done
  IFS=$nvd_ifs; set +f; set --
}
nvd_end() {
  # Signal what is left of the session: TERM; only when something was signalled, up to the grace for it to go,
  # then KILL.
  nvd_sig=TERM; nvd_sweep; [ "$nvd_n" = 0 ] && return 0
  nvd_i=0
  while [ "$nvd_i" -lt "$nvd_grace_ticks" ]; do
    sleep 0.1 2>/dev/null || sleep 1; nvd_i=$((nvd_i + 1))
    nvd_sig=0; nvd_sweep; [ "$nvd_n" = 0 ] && return 0
  done
  nvd_sig=KILL; nvd_sweep
}
nvd_h() { head -c "$2" >"$1"; exec wc -c >"$1n"; }
nvd_cap() {
  # Starts the cappers of command $1's stdout and stderr (cap $2; $3=t: stdout keeps its tail) and opens their
  # FIFOs as fds 5 and 6 for its launch: per stream a subshell that keeps the head, then counts (and drains) the
  # rest; for a tail, dd passes stdout on and counts it, and tail keeps its end. The FIFOs are opened write-only,
  # which waits for each capper to open its end: a FIFO's data is lost when its last writer closes before any
  # reader opened it.
  if [ "$3" = t ]; then
    dd bs=65536 <"$d/$1.po" >"$d/$1.pt" 2>"$d/$1.ot" & nvd_c="$nvd_c $!"
    tail -c "$2" <"$d/$1.pt" >"$d/$1.o" 2>/dev/null & nvd_c="$nvd_c $!"
  else
    nvd_h "$d/$1.o" "$2" <"$d/$1.po" 2>/dev/null & nvd_c="$nvd_c $!"
  fi
  nvd_h "$d/$1.e" "$2" <"$d/$1.pe" 2>/dev/null & nvd_c="$nvd_c $!"
  exec 5>"$d/$1.po" 6>"$d/$1.pe"
}
nvd_rd() { nvd_v=; read -r nvd_v 2>/dev/null <"$1"; case $nvd_v in ''|*[!0-9]*) nvd_v=0 ;; esac; }
nvd_fr() {
  # The frame header of command $1 (exit status $2; $3=t: stdout kept its tail) into $d/$1.h. The kept sizes
  # come from the one wc over all files (nvd_k_*); the true sizes from each capper's count of the rest, or for a
  # tail kept by the shell cappers from dd's "N bytes copied".
  eval "nvd_o=\${nvd_k_$1_o:-0} nvd_e=\${nvd_k_$1_e:-0}"
  if [ "$3" = t ]; then
    nvd_v=0
    while read -r nvd_a nvd_b nvd_c; do
      case $nvd_b in byte|bytes) case $nvd_a in ''|*[!0-9]*) ;; *) nvd_v=$nvd_a ;; esac ;; esac
    done 2>/dev/null <"$d/$1.ot"
    [ "$nvd_v" -ge "$nvd_o" ] || nvd_v=$nvd_o
    nvd_ot=$nvd_v
  else nvd_rd "$d/$1.on"; nvd_ot=$((nvd_o + nvd_v)); fi
  nvd_rd "$d/$1.en"
  printf '__NVD_CMD %s rc=%s out=%s/%s err=%s/%s__\n' "$1" "$2" "$nvd_o" "$nvd_ot" "$nvd_e" \
    "$((nvd_e + nvd_v))" >"$d/$1.h"
}
# The watcher's wait without a heartbeat: EOF only. The main shell stops the watcher with TERM at the normal end.
nvd_wait_eof() {
  trap 'exit 0' TERM
  while IFS= read -r nvd_x; do :; done
}
# With a heartbeat: a clock subshell sends USR1 every $nvd_period s; a trapped signal interrupts the read builtin (it
# returns 1 with what it read so far), so the loop sees EOF, a heartbeat byte, or a tick. A tick after a whole
# period without a byte ends the batch: it ends after between 1 and 2 periods of silence. A missed tick (a race
# with the read) only delays that by a period.
# The clock is started BEFORE the watcher sets its own traps: a child forked with a caught TERM keeps the parent's
# handler until it resets it, so a TERM that reaches it in that moment is swallowed, and a clock that missed its
# TERM would run on (and, when waited for, hold up the batch's answer) for a period. Forked first, it has TERM at
# its default until it sets its own trap. Its first USR1 comes a whole period later, long after the watcher's USR1
# trap is set. The watcher does not wait for the clock when it stops: the clock's own trap ends it and its sleep at
# once, and a clock whose watcher is gone exits at its next tick all the same.
nvd_wait_heartbeat() {
  nvd_heard=1; nvd_tick=
  ( trap 'kill $! 2>/dev/null; exit 0' TERM
    while sleep "$nvd_period" & wait $!; do kill -USR1 "$nvd_me" 2>/dev/null || exit 0; done ) &
  nvd_clk=$!
  trap 'nvd_tick=1' USR1
  trap 'kill "$nvd_clk" 2>/dev/null; exit 0' TERM
  while :; do
    nvd_x=
    if IFS= read -r nvd_x; then nvd_heard=1; continue; fi
    [ -n "$nvd_x" ] && nvd_heard=1
    [ -n "$nvd_tick" ] || break
    nvd_tick=
    [ -n "$nvd_heard" ] || break
    nvd_heard=
  done
  trap '' TERM USR1
  kill $nvd_clk 2>/dev/null && wait $nvd_clk
}

# @part lock
# The first line of holder file $1 into nvd_info (1: no whole line yet, or gone); for one that is not a plain file
# with one link, a line saying it was not read. Never through a link nor waiting on a FIFO (dd's nofollow,nonblock):
# in a folder shared with a group, another member can swap a holder for a link to a file only root may read.
nvd_nl='
'
nvd_holder() {
  nvd_hp=$1 nvd_hn=${1##*/} nvd_hwhy=
  nvd_hl=$(LC_ALL=C ls -ldn -- "$nvd_hp" 2>/dev/null) || return 1
  set -f
  # shellcheck disable=SC2086  # ls's fields as words: mode, links, owner, ...
  set -- $nvd_hl
  set +f
  case $1 in
    -*) [ "$2" = 1 ] || nvd_hwhy="has other hard links" ;;
    l*) nvd_hwhy="is a symbolic link" ;;
    *) nvd_hwhy="is not a plain file" ;;
  esac
  if [ -z "$nvd_hwhy" ]; then
    nvd_hr=$(dd if="$nvd_hp" iflag=nofollow,nonblock bs=4096 count=1 2>/dev/null && echo .) || nvd_hr=
    [ -n "$nvd_hr" ] || nvd_hwhy="cannot be read"
  fi
  if [ -n "$nvd_hwhy" ]; then nvd_info="holder unreadable ($nvd_hn $nvd_hwhy, not read)"; return 0; fi
  case $nvd_hr in *"$nvd_nl"*) nvd_info=${nvd_hr%%"$nvd_nl"*}; return 0 ;; esac
  return 1
}
# $1 is a real folder (not a link) owned by root.
nvd_rootdir() {
  [ -d "$1" ] && [ ! -L "$1" ] || return 1
  nvd_hl=$(LC_ALL=C ls -ldn -- "$1" 2>/dev/null) || return 1
  set -f
  # shellcheck disable=SC2086  # ls's fields as words: mode, links, owner, ...
  set -- $nvd_hl
  set +f
  [ "$3" = 0 ]
}
if command -v flock >/dev/null 2>&1; then
  nvd_ld=${NVDEPLOY_LOCK_DIR:-}
  if [ -z "$nvd_ld" ]; then
    # The system's lock folder when its nvdeploy folder is there for us (root's, or one an admin made for a group)
    # or root may make it; else the user's own runtime folder; else (neither) unlocked. Root never takes one that
    # another user made (anyone may make it in /run/lock, 1777, before root's first run): its lock is then
    # $nvd_root_lock, in /run, where only root can make it (batch_runner.py's lock_folder, the same rule).
    [ -n "$nvd_uid" ] || nvd_myuid
    nvd_lb='' nvd_ro=''
    for nvd_x in $nvd_lock_bases; do [ -d "$nvd_x" ] && [ ! -L "$nvd_x" ] && { nvd_lb=$nvd_x; break; }; done
    [ "$nvd_uid" = 0 ] && [ -n "$nvd_root_lock" ] && [ -d "${nvd_root_lock%/*}/" ] && nvd_ro=1
    if [ -n "$nvd_lb" ] && { [ -e "$nvd_lb/nvdeploy" ] || [ -L "$nvd_lb/nvdeploy" ]; } && \
        { [ -z "$nvd_ro" ] || nvd_rootdir "$nvd_lb/nvdeploy"; }; then
      nvd_safe "$nvd_lb/nvdeploy" || nvd_refuse "run lock folder"
      [ -w "$nvd_lb/nvdeploy" ] && [ -x "$nvd_lb/nvdeploy" ] && nvd_ld=$nvd_lb/nvdeploy
    elif [ -n "$nvd_lb" ] && [ -z "$nvd_ro" ] && [ ! -e "$nvd_lb/nvdeploy" ] && [ ! -L "$nvd_lb/nvdeploy" ] && \
        [ -O "$nvd_lb" ]; then
      nvd_ld=$nvd_lb/nvdeploy
    fi
    [ -n "$nvd_ld" ] || [ -z "$nvd_ro" ] || nvd_ld=$nvd_root_lock
    [ -n "$nvd_ld" ] || nvd_ld=${XDG_RUNTIME_DIR:+${XDG_RUNTIME_DIR%/}/nvdeploy}
  fi
  if [ -n "$nvd_ld" ]; then
    [ "$nvd_ld" = / ] || nvd_ld=${nvd_ld%/}
    [ -e "$nvd_ld" ] || [ -L "$nvd_ld" ] || mkdir -m 700 "$nvd_ld" 2>/dev/null
    nvd_safe "$nvd_ld" || nvd_refuse "run lock folder"
    if command exec 9<"$nvd_ld"; then
      if flock -n 9; then
        for nvd_f in "$nvd_ld"/holder.*; do
          # Stale: its pid is gone. Removed only when it is a plain file of ours (root: anyone's).
          nvd_x=${nvd_f##*/holder.}; nvd_x=${nvd_x%%.*}
          # shellcheck disable=SC2015  # any test failing means: not a stale holder file, skip it
          [ -f "$nvd_f" ] && [ ! -L "$nvd_f" ] && [ ! -d "/proc/$nvd_x" ] || continue
          { [ -O "$nvd_f" ] || [ "$nvd_uid" = 0 ]; } && rm -f "$nvd_f" 2>/dev/null
        done
        # A fresh file made by mktemp (O_EXCL, mode 0600) in the checked folder, where nobody else can replace it:
        # the holder info is never written through a name someone planted.
        nvd_hf=$(mktemp "$nvd_ld/holder.$$.XXXXXX" 2>/dev/null) || nvd_hf=
        nvd_u=${USER:-$LOGNAME}
        [ -n "$nvd_u" ] || nvd_u=$(id -un 2>/dev/null || id -u)
        # One line in one write: a busy reader takes only a whole line (see below).
        [ -n "$nvd_hf" ] && printf 'user=%s run=%s pid=%s since=%s\n' "$nvd_u" "$nvd_run" "$$" \
          "$(date -u +%Y-%m-%dT%H:%M:%SZ 2>/dev/null)" 2>/dev/null >"$nvd_hf"
        # In a folder shared with a group (not ours), the others' busy message reads it.
        [ -n "$nvd_hf" ] && [ ! -O "$nvd_ld" ] && chmod 644 "$nvd_hf" 2>/dev/null
      else
        nvd_info='' nvd_try=0
        while :; do
          nvd_live=''
          for nvd_f in "$nvd_ld"/holder.*; do
            nvd_x=${nvd_f##*/holder.}; nvd_x=${nvd_x%%.*}
            # shellcheck disable=SC2015  # any test failing means: not a live holder, skip it
            { [ -e "$nvd_f" ] || [ -L "$nvd_f" ]; } && [ -d "/proc/$nvd_x" ] || continue
            nvd_live=1
            nvd_holder "$nvd_f" && break
          done
          # The holder makes its file (mktemp) and then writes its line: a live holder's file without a whole line
          # is being written, so it is read again shortly (2 s at most) rather than named "unknown".
          if [ -n "$nvd_info" ] || [ -z "$nvd_live" ] || [ "$nvd_try" -ge 20 ]; then break; fi
          nvd_try=$((nvd_try + 1))
          sleep 0.1 2>/dev/null || sleep 1
        done
        printf '__NVD_BUSY__ %s\n' "${nvd_info:-holder unknown (no holder info in $nvd_ld)}"
        printf '%s\n' "$nvd_endm"
        exit 0
      fi
    fi
  fi
fi

# @part watcher
# The watcher: one subshell reading the batch's stdin. Its wait returns at EOF (or, with a heartbeat, after a whole
# clock period without one); then it ends the session and removes the temp folder.
exec 3<&0
(
  trap '' INT HUP PIPE
  IFS= read -r nvd_l </proc/self/stat; nvd_me=${nvd_l%% *}; nvd_spare=$nvd_me
  if [ "$nvd_period" -gt 0 ]; then nvd_wait_heartbeat; else nvd_wait_eof; fi
  trap '' TERM USR1
  nvd_end
  rm -rf "$d" ${nvd_hf:+"$nvd_hf"}
) <&3 3<&- 9<&- >/dev/null 2>&1 &
# shellcheck disable=SC2034  # read by the script's end (batch.py): kill "$nvd_w"
nvd_w=$!
exec 3<&-
