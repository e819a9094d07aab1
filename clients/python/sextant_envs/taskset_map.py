"""The map `sextant envs push` writes beside a pushed task set, `<set>/.sextant-taskset.json`: the
set's id and, for each task's name (its path under the set), its index and archive hash. The edge
knows tasks by index and hash only; the names stay on the machine that pushed them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Dict, Union

TASKSET_FILE = ".sextant-taskset.json"


@dataclass(frozen=True)
class TaskRef:
    index: int
    sha256: str
    bytes: int


@dataclass(frozen=True)
class TaskSetMap:
    id: str
    base_url: str
    pushed_at: str
    tasks: Dict[str, TaskRef]

    def index(self, name: str) -> int:
        """The index of the task named `name`, for `sessions.create` and `rollouts.run`'s `tasks`."""
        try:
            return self.tasks[name].index
        except KeyError:
            known = ", ".join(sorted(self.tasks)[:10])
            raise KeyError(f"no task named {name!r} in task set {self.id} (it has {known})") from None


def load_taskset_map(path: Union[str, "os.PathLike[str]"]) -> TaskSetMap:
    """Reads the map of a pushed task set: `path` is the set's directory or the map file itself."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, TASKSET_FILE)
    with open(path, encoding="utf-8") as file:
        raw = json.load(file)
    return TaskSetMap(
        id=raw["id"],
        base_url=raw.get("baseUrl", ""),
        pushed_at=raw.get("pushedAt", ""),
        tasks={
            name: TaskRef(int(t["index"]), str(t["sha256"]), int(t.get("bytes", 0)))
            for name, t in raw.get("tasks", {}).items()
        },
    )
