"""From cells to jobs and back: submission, reruns, retries, the scheduler's answers tracked into run states."""
