"""The job layer: a Session plus a method name and options become a ready job, the one way every entry point
(CLI, audit, benchmarks, tests) runs label recovery, reconstruction, defenses and audits."""

from fedaudit.jobs.audit import AuditJob
from fedaudit.jobs.capture import CaptureJob
from fedaudit.jobs.defend import DefendJob, DefendResult
from fedaudit.jobs.labels import LabelJob
from fedaudit.jobs.reconstruct import ReconstructJob, ReconstructResult
from fedaudit.jobs.score import ScoreJob
from fedaudit.session import Aux, AuxSource, Session

__all__ = ["AuditJob", "Aux", "AuxSource", "CaptureJob", "DefendJob", "DefendResult", "LabelJob", "ReconstructJob",
           "ReconstructResult", "ScoreJob", "Session"]
