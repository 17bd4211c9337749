"""The Pykka runtime: the actors of one process and the messages they send each other.

Not for users: the facade (:class:`actors.DelayQueue`) builds and stops these actors, and
:mod:`actors.testing` is the supported way for test suites to reach them.
"""
