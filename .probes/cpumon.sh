#!/bin/bash
# samples utime+stime of node/redis processes every second
declare -A prev
while true; do
  for p in $(pgrep -f "node|redis-server"); do
    [ -r /proc/$p/stat ] || continue
    read -r -a f < /proc/$p/stat 2>/dev/null || continue
    t=$(( ${f[13]} + ${f[14]} ))
    if [ -n "${prev[$p]}" ]; then d=$(( t - prev[$p] )); [ $d -gt 5 ] && echo "$(date +%s) $p $d $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-90)"; fi
    prev[$p]=$t
  done
  sleep 1
done
