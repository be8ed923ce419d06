#!/usr/bin/env bash
# End-to-end check of a running test cluster (after slurm/start.sh): submits the kinds of
# jobs the orchestrator submits and checks what accounting (sacct) recorded for them.
#
#   slurm/smoke.sh        # exit 0 when every job ended in the expected state (~20-30 s)
set -euo pipefail

SCRIPT_NAME=smoke
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
. "$HERE/common.sh"

"$HERE/check.sh" -q || die "test cluster is not up: run slurm/start.sh"

WORK="$(mktemp -d /tmp/slurm-smoke.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

sub() { sbatch --parsable "$@" | cut -d';' -f1; }
declare -A EXPECT
j=$(sub -p cpu --wrap 'hostname');                                   EXPECT[$j]=COMPLETED
j=$(sub -p cpu --cpus-per-task=1 --mem=1G --wrap 'srun hostname');   EXPECT[$j]=COMPLETED
j=$(sub -p k20m --gres=gpu:k20m:1 --wrap 'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; sleep 2')
EXPECT[$j]=COMPLETED; GRES_JOB=$j
j=$(sub -p p100 --gpus-per-node=p100:2 --wrap 'sleep 1');            EXPECT[$j]=COMPLETED
j=$(sub -p cpu --exclusive --wrap 'sleep 1');                        EXPECT[$j]=COMPLETED
# Two nodes at once, in the CPU partition and with a fake GPU on each node of a GPU partition.
j=$(sub -p cpu -N2 --ntasks-per-node=1 --mem=1G --wrap 'srun printenv SLURMD_NODENAME'); EXPECT[$j]=COMPLETED
j=$(sub -p p100 -N2 --ntasks-per-node=1 --gpus-per-node=p100:1 --mem=1G --wrap 'srun true'); EXPECT[$j]=COMPLETED
j=$(sub -p cpu --mem=1G --wrap 'exit 3');                            EXPECT[$j]=FAILED
j=$(sub -p cpu --mem=1G --wrap 'sleep 300');                         EXPECT[$j]=CANCELLED; CANCEL_JOB=$j
ARRAY=$(sub --array=0-3%2 -p cpu --mem=1G --wrap 'sleep 1')
for t in 0 1 2 3; do EXPECT[${ARRAY}_$t]=COMPLETED; done

squeue -o '%.12i %.9P %.9T %.20b %R'

# Cancel the long job once it runs, so the CANCELLED record is of a running job.
deadline=$((SECONDS + 120))
until [ "$(squeue -h -j "$CANCEL_JOB" -o %T 2>/dev/null)" = RUNNING ]; do
  [ $SECONDS -lt $deadline ] || die "job $CANCEL_JOB never started"
  sleep 0.5
done
scancel "$CANCEL_JOB"

deadline=$((SECONDS + 180))
while [ -n "$(squeue -h -o %i)" ]; do
  [ $SECONDS -lt $deadline ] || die "jobs still queued after 180 s: $(squeue -h -o '%i %T' | tr '\n' ' ')"
  sleep 0.5
done

ids="$(printf '%s\n' "${!EXPECT[@]}" | sed 's/_[0-9]*$//' | sort -un | paste -sd,)"
# slurmdbd receives job records asynchronously: give it a moment to catch up.
bad=0
for _ in $(seq 40); do
  out="$(sacct -X -j "$ids" --format=JobID,State,Partition,AllocTRES%80,ExitCode -P)"
  bad=0
  for id in "${!EXPECT[@]}"; do
    state="$(awk -F'|' -v id="$id" '$1 == id {print $2}' <<<"$out")"
    [[ "$state" == "${EXPECT[$id]}"* ]] || bad=$((bad + 1))
  done
  [ $bad -eq 0 ] && break
  sleep 0.5
done
echo "$out"
echo "gres job output: $(cat "slurm-$GRES_JOB.out")"
for id in "${!EXPECT[@]}"; do
  state="$(awk -F'|' -v id="$id" '$1 == id {print $2}' <<<"$out")"
  [[ "$state" == "${EXPECT[$id]}"* ]] || log "job $id: expected ${EXPECT[$id]}, sacct says '${state:-nothing}'"
done
[ $bad -eq 0 ] || die "$bad job(s) not in the expected state"
log "ok: ${#EXPECT[@]} jobs recorded by sacct as expected"
