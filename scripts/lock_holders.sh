#!/usr/bin/env bash
# Which processes hold kernelwright's lock files (the machine lock's classes, GPU locks, build locks), every
# 20 s after a first delay: for a bench or judge that seems stuck, this says who it waits on.
#   bash scripts/lock_holders.sh [DELAY_S] > locks.txt &
sleep "${1:-0}"
while true; do
  echo "=== $(date +%T) lock holders"
  for p in /proc/[0-9]*; do
    fds=$(ls -l "$p"/fd 2>/dev/null | grep -o 'kernelwright[^ ]*lock[^ ]*' | sort -u | tr '\n' ' ')
    [ -n "$fds" ] && echo "$(basename "$p") $(cat "$p"/wchan 2>/dev/null) [$fds] $(tr '\0' ' ' < "$p"/cmdline | cut -c1-160)"
  done
  sleep 20
done
