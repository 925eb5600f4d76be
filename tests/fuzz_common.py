"""What the random-kernel fuzzers share: generated module sources written to files and imported (one
module = one compiler call for all its kernels), and hypothesis settings without shrinking."""

import hashlib
import importlib.util
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase

_GENERATED_DIR = Path(tempfile.mkdtemp(prefix="xsim_fuzz_"))  # one folder per session

# No shrinking: every shrink step is a compiler call (minutes in all), and the failure message
# already names the failing kernel and shows the module's source.
COMMON = {"deadline": None, "phases": [Phase.explicit, Phase.reuse, Phase.generate],
          "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]}


def load_module(source: str):
    """Write ``source`` into a file and import it; its kernels compile as one module."""
    digest = hashlib.blake2b(source.encode(), digest_size=10).hexdigest()
    name = f"xsim_fuzz_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    path = _GENERATED_DIR / f"{name}.py"
    path.write_text(f"MODULE = {name!r}\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
