"""Global settings. ``mode``: "release" (default) or "debug" (bounds-checked array access, eager
tape overwrite errors); ``XSIM_MODE`` sets the initial value."""

import os

mode: str = os.environ.get("XSIM_MODE", "release")
