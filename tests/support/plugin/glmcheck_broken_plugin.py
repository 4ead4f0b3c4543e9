"""A plugin whose import fails, as a package with a missing dependency would."""

import glmcheck_no_such_dependency  # noqa: F401
