"""The fuzz child process, `python -m workbook.fuzz JOURNAL` with the cases as JSON on stdin; harness.run_cases
starts it."""

import sys

from workbook.fuzz.harness import child_main

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1]))
