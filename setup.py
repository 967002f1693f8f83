"""Package discovery, the one thing pyproject.toml cannot say: applications/ installs as attnlayers.applications,
and every folder under it with an __init__.py is found, so a new application needs only its folder."""

from setuptools import find_packages, setup

setup(packages=["attnlayers"] + [f"attnlayers.{name}" for name in find_packages(include=["applications*"])])
