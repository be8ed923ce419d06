"""submitit's Slurm executor as the orchestrator submits with it: every submission one job array
whose tasks' pickles are written as one bundle before sbatch and nothing after (slurm_task.py
says why, and takes each task's pickle out on the node).
"""
from __future__ import annotations

import io
import pickle
import shlex
import uuid
from typing import Any

from orchestrator.backends.slurm_task import bundle_path, write_bundle


def executor_class() -> type:
    """submitit's SlurmExecutor that writes an array's task pickles as one bundle before sbatch
    and nothing after (see slurm_task.py): every submission is an array, and its batch script
    runs `orchestrator.backends.slurm_task` first, which takes the task's pickle out."""
    # lazy: `status` reads the Slurm backend and never submits; submitit is what a submission costs
    import submitit
    from submitit.core import utils  # lazy: as submitit
    from submitit.slurm.slurm import SlurmJob  # lazy: as submitit

    class OrchestratorSlurmExecutor(submitit.SlurmExecutor):
        def submit_array(self, fn: Any, specs: list) -> list[str]:
            """fn(spec) for each spec as one array; its tasks' job ids. What a launch needs of a
            submission, without the two submitit Job objects per task that `batch()` makes (a
            placeholder and the job; each works out its paths: a tenth of a 10,000-cell launch)."""
            return [job_id for job_id, _ in self._submit_array([utils.DelayedSubmission(fn, spec) for spec in specs])]

        def _internal_process_submissions(self, delayed_submissions: list) -> list:
            return [SlurmJob(folder=self.folder, job_id=job_id, tasks=list(range(tasks)))
                    for job_id, tasks in self._submit_array(delayed_submissions)]

        def _submit_array(self, delayed_submissions: list) -> list[tuple[str, int]]:
            """The bundle written, then one sbatch: (job id, tasks per node) of each member."""
            folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
            folder.mkdir(parents=True, exist_ok=True)
            name = self.parameters.get("job_name") or f"orch-{uuid.uuid4().hex[:8]}"
            for delayed in delayed_submissions:
                delayed.set_timeout(self.parameters.get("time", 5), self.max_num_timeout)
            write_bundle(bundle_path(folder, name), [_pickled(d) for d in delayed_submissions])
            array = OrchestratorSlurmExecutor(self.folder, self.max_num_timeout, python=self.python)
            array.update_parameters(**{**self.parameters, "job_name": name})
            array.parameters["map_count"] = len(delayed_submissions)
            self._throttle()
            first = array._submit_command(self._submitit_command_str)
            return [(f"{first.job_id}_{index}", first.num_tasks) for index in range(len(delayed_submissions))]

        @property
        def _submitit_command_str(self) -> str:
            return " ".join([self.python, "-u -m orchestrator.backends.slurm_task", shlex.quote(str(self.folder))])

    return OrchestratorSlurmExecutor


def _pickled(delayed: Any) -> bytes:
    """A task's pickle, as submitit's `DelayedSubmission.dump` makes it, with the standard pickler
    (several times faster than cloudpickle on a job's spec) in its fast mode: no memo, which a
    spec (plain dicts, lists and dataclasses, no object reached twice that must stay one) does not
    need — a third of the pickling of 10,000 specs (0.20 -> 0.13 s); cloudpickle only for what the
    standard one cannot name (a function made at run time) or a spec that refers to itself."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True
    try:
        pickler.dump(delayed)
        return out.getvalue()
    except (pickle.PicklingError, AttributeError, TypeError, RecursionError, ValueError):
        import cloudpickle  # lazy: only for what the standard pickler cannot name (submitit's dependency)

        return cloudpickle.dumps(delayed, protocol=pickle.HIGHEST_PROTOCOL)
