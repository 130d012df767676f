"""Missing optional packages are reported by name."""

import pytest

from jaxgen.data import MissingDataError, debian_files, require_module


def test_missing_python_package_names_pip_command():
    with pytest.raises(MissingDataError, match="pip install no-such-pkg"):
        require_module("no_such_module_jaxgen", pip_name="no-such-pkg")
    assert require_module("json").dumps([]) == "[]"


def test_missing_debian_package_names_apt_command():
    with pytest.raises(MissingDataError, match="apt-get install jaxgen-no-such-package"):
        debian_files("jaxgen-no-such-package")
