#!/bin/bash
# The oracle's answer: write the greeting the instruction asks for.
set -euo pipefail
echo "Hello, world!" > /app/hello.txt
