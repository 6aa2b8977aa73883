#!/usr/bin/env bash
# Runs a Python test of fulcrum.torch with Debian's interpreter (the one
# that has python3-torch). tools/setup.sh installs PyTorch; where it is
# genuinely absent every case is reported skipped, saying so.
set -u
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
test=$1
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "skipped: PyTorch (python3-torch) is not installed for /usr/bin/python3"
  [ -n "${XML_OUTPUT_FILE:-}" ] && cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0"?>
<testsuites><testsuite name="$test" tests="1" failures="0" skipped="1"><testcase name="$test"><skipped message="PyTorch is not installed"/></testcase></testsuite></testsuites>
XML
  exit 0
fi
export PYTHONPATH="${PWD}/client/python:${PWD}/$(dirname "$test")"
exec /usr/bin/python3 "$test"
