"""Which register-form field a storage refusal is about.

Lakekeeper refuses a warehouse whose storage it cannot use with one generic error type.
The portal then runs its own connection test (`app.storage_probe`) with the same form and
turns the first failing check into a message on the field at fault: a missing bucket, keys
the store does not accept and an unreachable endpoint each say so, beside the field to fix.
"""

from __future__ import annotations

from app.storage_probe import ProbeReport

# The probe's diagnoses (the start of its check messages) and the field each points at.
_FIELD_OF_DIAGNOSIS = (
    (
        "Bucket not found",
        "bucket",
        "This bucket does not exist at the endpoint (or these keys cannot see it).",
    ),
    ("Invalid bucket name", "bucket", "The store refuses this bucket name."),
    (
        "Access denied: the access key is not known",
        "access_key_id",
        "Keys refused: the store does not know this access key id.",
    ),
    (
        "Access denied: the signature does not match",
        "secret_access_key",
        "Keys refused: the secret access key does not match the access key id.",
    ),
    (
        "Access denied: the session token",
        "secret_access_key",
        "Keys refused: the session token is not valid.",
    ),
    # The keys are known and signed correctly, yet refused: S3 answers so for a bucket that does
    # not exist as well as for one the keys may not use, and does not tell which.
    (
        "Access denied",
        "bucket",
        "No access to this bucket with these keys: it does not exist, or the keys may not write, read "
        "and delete under this prefix.",
    ),
    ("Request refused: wrong region", "region", "Wrong region for this endpoint or bucket."),
    ("The bucket is in another region", "region", "The bucket is in another region."),
    ("Endpoint unreachable", "endpoint", "Endpoint unreachable: nothing answered at this URL."),
    ("Endpoint did not answer", "endpoint", "Endpoint unreachable: it did not answer in time."),
    ("Invalid endpoint URL", "endpoint", "Not a usable endpoint URL."),
    (
        "The endpoint did not answer as S3",
        "endpoint",
        "This endpoint did not answer as an S3 store: check its URL and port.",
    ),
)


def field_errors(report: ProbeReport) -> dict[str, str]:
    """Field → message for the probe's first failure; {} when every check passed."""
    failure = report.first_failure
    if failure is None:
        return {}
    for start, field, message in _FIELD_OF_DIAGNOSIS:
        if failure.message.startswith(start):
            return {field: message}
    return {"form": f"The storage check '{failure.name}' failed: {failure.message}"}
