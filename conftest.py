"""Root conftest: anchors pytest's rootdir here so the project's tests are never shadowed by the ``tests``
package that verl's wheel installs into site-packages (tests run with ``--import-mode=importlib``)."""

pytest_plugins = ["pytester"]
