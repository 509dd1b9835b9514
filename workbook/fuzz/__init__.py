"""Fuzzing the workbook's compiled ops in a child process, where a crash is a result, not the end.

A case is plain data (JSON): which call to make, its arguments as recipes (`tensor` specs, or plain
Python values), and what must happen: `"expect": "result"` (the call must return what a reference
computes, gradients included when an input requires grad) or `"expect": "error"` (the call must
raise an exception whose message names one of `"names"`, the arguments the case broke).

    results = harness.run_cases(cases)   # [{"case": ..., "ok": bool, "detail": str}, ...]

`run_cases` starts `python -m workbook.fuzz`, which loads every op library once and runs the cases
one after the other, writing each case's number to a journal file before it starts. If the child
dies (a signal, an abort, a hang past the timeout), the journal names the case that killed it; that
case is reported as a crash and a new child carries on with the next one.

A tensor spec: {"shape": [2, 3], "dtype": "float32", "layout": "contiguous", "device": "cpu",
"grad": False, "special": None, "values": None, "seed": 0}. `layout` is contiguous, transposed,
sliced (every other element), expanded (stride 0 along dim 0) or overlap (windows of one buffer);
`special` puts a nan, inf or -inf first; `values` gives the elements (row-major) instead of random
ones.

The modules: recipes (a case's arguments, built), compare (results, gradients and error messages
judged; Mismatch), families (each op family's call and reference), harness (run_cases, the child process
and its journal), __main__ (the child's `python -m workbook.fuzz JOURNAL`).
"""
