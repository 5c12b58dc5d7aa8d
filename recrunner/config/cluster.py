"""Schema of the `cluster` group: where the job runs."""

from dataclasses import dataclass
from enum import StrEnum


class ClusterName(StrEnum):
    local = "local"
    k8s = "k8s"


@dataclass
class ClusterConfig:
    name: ClusterName = ClusterName.local
