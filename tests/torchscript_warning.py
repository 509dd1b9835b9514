"""The mark of the test files whose tests run TorchScript (torch.jit.script, trace, save, load): their own, or
torch's own calls (torch.func.jvp, torch.export of a module holding a TorchScript class, compiling a package).

TorchScript warns that it is deprecated on every such call; the chapters teach it all the same, and chapter 06
shows that warning. The filter matches the message in any category (torch 2.14 says it with a FutureWarning).
A test module sets `pytestmark = IGNORE_JIT_DEPRECATION`.
"""

import pytest

IGNORE_JIT_DEPRECATION = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated")
