# Command-line flags for the bench/ and tools/ scripts (source it):
#
#   workers=2 runs=3                  # the defaults
#   flags_parse workers runs -- "$@"  # --workers 4 sets $workers
#
# Each --NAME VALUE sets the shell variable NAME; an unknown flag, or one
# without its value, names the flags there are and exits 2. (The names
# must not be flags_parse's own locals: names, flag, known.)
flags_parse() {
  local names=() flag known
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    names+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift  # the --
  while [ $# -gt 0 ]; do
    known=0
    for flag in "${names[@]}"; do
      [ "$1" = "--$flag" ] && known=1
    done
    if [ "$known" = 0 ] || [ $# -lt 2 ]; then
      echo "unknown argument or missing value: $1 (flags: ${names[*]/#/--})" >&2
      exit 2
    fi
    printf -v "${1#--}" '%s' "$2"
    shift 2
  done
}
