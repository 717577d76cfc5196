# Sourced by scripts/kafka.sh and scripts/debezium.sh: what both need to
# watch and stop a JVM they started in the background. $tag names the
# calling script in messages.

# Jars fetched once into folder $1 from pom $2: copy_jars (defined by the
# caller) fills a fresh folder, given as its argument, which is renamed
# into place only when complete; a marker holds the pom's checksum, so an
# edited pom fetches again and an unchanged one costs nothing. $3 says what
# is fetched. Prints the folder.
fetch_once() {
  local dest="$1" pom="$2" what="$3" sum tmp
  sum="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [ -f "$dest/.complete" ] && [ "$(cat "$dest/.complete")" = "$sum" ]; then
    echo "$dest"
    return
  fi
  command -v mvn >/dev/null || { echo "$tag: mvn is missing (apt-get install maven)" >&2; exit 1; }
  tmp="$dest.partial.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  echo "fetching $what into $dest" >&2
  if ! copy_jars "$tmp" >"$tmp.log" 2>&1; then
    cat "$tmp.log" >&2
    echo "$tag: mvn could not fetch $what" >&2
    rm -rf "$tmp"
    exit 1
  fi
  rm -f "$tmp.log"
  echo "$sum" >"$tmp/.complete"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  echo "$dest"
}

# Whether the jars in folder $1 are there and java can run them.
need_jars() {
  [ -f "$1/.complete" ] || { echo "$tag: no jars in $1: run scripts/$tag fetch" >&2; exit 1; }
  command -v java >/dev/null || { echo "$tag: java is missing (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
}

# Whether pid $1 runs: a killed JVM is a zombie until init reaps it.
alive() {
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" || true
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# Whether pid $1 runs a command line matching the regex $2 (a stale pid
# file may name a pid that was reused since).
runs() {
  alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qE "$2"
}

# This start's part of log $1 (from line $2 on): its errors first (lines
# matching $3), since a shutdown buries them, then its end.
show_log() {
  echo "--- errors in $1 ---" >&2
  tail -n "+$2" "$1" | grep -E "$3" | head -n 20 >&2 || true
  echo "--- the end of $1 ---" >&2
  tail -n "+$2" "$1" | tail -n 40 >&2
}

# Stops the process in pid file $1 if it runs a command matching $2:
# SIGTERM (and SIGCONT, should it be paused), SIGKILL after 30 s.
stop_pid_file() {
  local pidfile="$1" pattern="$2" pid
  [ -f "$pidfile" ] || { echo "$tag: no $pidfile" >&2; return 0; }
  pid="$(cat "$pidfile")"
  if runs "$pid" "$pattern" && kill -TERM "$pid" 2>/dev/null; then
    kill -CONT "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then
      echo "$tag: pid $pid ignored SIGTERM for 30 s; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
}
