"""Tests of the Evennia contrib, run by Evennia's own test runner.

    evennia test --settings settings.py ai_tools.contrib.evennia

(``make test-evennia`` sets up the virtualenv and a game directory first.)
They use Evennia's test base classes; the end-to-end test against a running
server is ``scripts/evennia/e2e.py``.
"""
