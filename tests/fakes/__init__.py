"""Test doubles the tests import by name: `fakes.lane` (an OpenAI-style streaming server with scripted behaviour)
and `fakes.cards` (synthetic arms and a fake lane for card runs). `tests/` is on sys.path (pytest's rootdir
conftest), so `from fakes import cards` works from every test module."""
