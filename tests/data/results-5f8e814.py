"""How tests/data/results-5f8e814.db was made: by the orchestrator as released at 5f8e814, the
last release without migrations, for test_db's upgrade test. Its collector landed runs from
result files (one failed, one rerun as attempt 2, one on a GPU) and its launcher recorded a run
it never collected; the file was then compacted (small pages, no WAL).

    git archive 5f8e814 orchestrator tests/result_factory.py | tar -x -C /tmp/prev
    PYTHONPATH=/tmp/prev:/tmp/prev/tests .venv/bin/python tests/data/results-5f8e814.py \
        tests/data/results-5f8e814.db /tmp/prev-runs
"""
import json, sqlite3, sys, time
from pathlib import Path

from orchestrator.store import db
assert db.SCHEMA_VERSION == 2, "run this with the orchestrator of 5f8e814 first on PYTHONPATH"
from orchestrator.results.collector import collect
from result_factory import make_result

out = Path(sys.argv[1])
runs = Path(sys.argv[2])
results = [
    make_result(model="lenet", repeat=r, metrics={"images_per_sec": ips, "rss_peak_bytes": 300 * 2**20})
    for r, ips in enumerate((1000.0, 1040.0, 960.0))
] + [
    make_result(model="alexnet", repeat=0, metrics={"images_per_sec": 100.0}),
    make_result(model="alexnet", repeat=1, attempt=1, state="failed"),
    make_result(model="alexnet", repeat=1, attempt=2, metrics={"images_per_sec": 150.0}),
    make_result(model="resnet50", gpus=1, metrics={
        "images_per_sec": 2065.9, "gpu_power_avg_w": 597.0, "gpu_idle_power_w": 78.6, "energy_j": 11112.5,
        "energy_net_j": 9649.0, "energy_per_image_j": 0.289, "images_per_sec_per_w": 3.46,
        "gpu_mem_peak_bytes": 14550 * 2**20, "gpu_util_avg": 98.9}),
]
for res in results[:-1]:  # provenance on one run is enough, and keeps the file small
    res["provenance"] = None
for res in results:
    d = runs / res["sweep_id"] / res["cell_id"] / f"{res['repeat']}.{res['attempt']}"
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps(res))
Session = db.open_db(f"sqlite:///{out}")
with Session.begin() as s:  # what the launcher records before it submits
    s.add(db.Sweep(id="sweep-a", created_at=time.time(), argv=["-m", "model=lenet,alexnet,resnet50,vgg16"],
                   overrides=[["model=lenet,alexnet,resnet50,vgg16"]], n_cells=4))
    vgg = make_result(model="vgg16")
    s.add(db.Cell(id=vgg["cell_id"], settings=vgg["cell"], created_at=time.time(), **vgg["cell"]))
    s.flush()
    s.add(db.SweepCell(sweep_id="sweep-a", cell_id=vgg["cell_id"], config={"model": {"name": "vgg16"}}))
    s.add(db.Run(uid=vgg["run_uid"], sweep_id="sweep-a", cell_id=vgg["cell_id"], repeat=0, attempt=1,
                 state="submitted", state_detail="Priority", job_id="4243", executor="slurm"))
print(collect(Session, runs))
Session.kw["bind"].dispose()
con = sqlite3.connect(out)  # small and self-contained: no WAL file beside it, small pages
con.execute("PRAGMA journal_mode = DELETE")
con.execute("PRAGMA page_size = 512")
con.execute("VACUUM")
con.close()
