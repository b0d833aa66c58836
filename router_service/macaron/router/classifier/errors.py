"""Errors of the specialist classifier."""

from __future__ import annotations


class ClassifierError(Exception):
    """Base of the classifier's errors."""


class ClassificationInputError(ClassifierError, ValueError):
    """The request cannot be classified as sent (empty, not UTF-8, no user turn); the message says why.

    A server maps it to INVALID_ARGUMENT / HTTP 400.
    """


class ArtifactError(ClassifierError):
    """The classifier artifact is missing, unreadable or of another format version."""


class TrainingDataError(ClassifierError):
    """The routing training data cannot be found or read; the message says what to do."""
