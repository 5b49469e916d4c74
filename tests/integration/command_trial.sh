#!/usr/bin/env bash
# A command trial in another language (bash): reads its params as JSON on stdin, prints its result.
# Modes: ok, memory (grows until killed), sleep (past any timeout), crash (SIGSEGV); each of the
# last three first starts a child (`sleep 300`) and writes its pid to the params' pidfile.
params=$(cat)
pidfile=$(printf '%s' "$params" | sed -n 's/.*"pidfile": *"\([^"]*\)".*/\1/p')
child() { sleep 300 & echo $! > "$pidfile"; }
case "$params" in
  *'"mode": "ok"'*) echo "some progress output"; echo "TRAINGUARD_RESULT {\"got\": $params}" ;;
  *'"mode": "memory"'*) child; awk 'BEGIN { s = "xxxxxxxx"; while (1) s = s s }' ;;
  *'"mode": "sleep"'*) child; sleep 300 ;;
  *'"mode": "crash"'*) child; kill -SEGV $$ ;;
  *) echo "unknown mode" >&2; exit 2 ;;
esac
