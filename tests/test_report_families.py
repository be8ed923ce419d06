"""The report's sections by network family (issue 37, item 6): trainers.common.inputs.FAMILIES, in
its order, each with its own figures and tables; a sequence network's speed in sequences/s with
its tokens/s beside it. The database is made as the launcher and the collector leave it (Study)."""
from test_report import Study, ips

from orchestrator.report import tables
from orchestrator.report.families import OTHER, family_of
from trainers.common import inputs


def test_every_network_is_in_one_family_and_the_sequence_ones_count_tokens():
    named = [m for f in inputs.FAMILIES for m in f.networks]
    assert sorted(named) == sorted(inputs.MODELS)  # each once
    assert [family_of(m).name for m in ("alexnet_r", "fcn_r", "lstm", "gpt")] == [
        "convolutional", "fully_connected", "recurrent", "transformer"]
    assert family_of("a_sites_own_net") is OTHER
    # an LSTM added to a table the token networks do not read would fall among the convolutional ones
    assert {family_of(m).name for m in inputs.MODELS if m.startswith("lstm")} == {"recurrent"}
    assert [f.name for f in inputs.FAMILIES if f.tokens] == ["recurrent", "transformer"]


def test_a_report_of_two_families_has_their_sections_in_order(tmp_path, db_url):
    """LeNet on MNIST and the LSTM (one refused): the page's figures and tables are under
    "Convolutional image networks", then "Recurrent networks" (none for the families without a
    cell); the recurrent tables give sequences/s and, beside them, tokens/s, which the
    convolutional section has no table of."""
    study = Study(tmp_path, url=db_url)
    study.cell(ips(100, 110), framework="torch")
    study.cell(ips(40, 42, tokens_per_sec=40 * 32), framework="torch", model="lstm", dataset="synthetic", seq_len=32)
    study.refuse("caffe/lstm/synthetic: caffe does not support it here", framework="caffe", model="lstm",
                 dataset="synthetic", seq_len=32)
    html = study.report(tmp_path / "report").index.read_text()

    figures = html[html.index("<h2>Figures</h2>"):html.index("<h2>Tables</h2>")]
    assert figures.index('id="figures-convolutional"') < figures.index('id="fig-throughput_mnist_lenet"') \
        < figures.index('id="figures-recurrent"') < figures.index('id="fig-throughput_synthetic_lstm"')
    body = html[html.index("<h2>Tables</h2>"):html.index('<h2 id="time-limits">')]
    sections = [part.split('"')[0] for part in body.split('<h3 class="family" id="tables-')[1:]]
    assert sections == ["convolutional", "recurrent"]
    conv, rec = body.split('<h3 class="family" id="tables-')[1:]
    assert "Training speed (img/s)" in conv and "tok/s" not in conv and "lstm" not in conv
    assert rec.index("Training speed (seq/s)") < rec.index("Training speed in tokens (tok/s)")
    tokens = rec[rec.index('id="t-recurrent-tokens_per_sec"'):]
    assert ">1,280<" in tokens and "caffe does not support it here" in tokens and "lenet" not in rec
    toc = body[:body.index('<h3 class="family"')]
    assert toc.index('href="#tables-convolutional"') < toc.index('href="#t-recurrent-tokens_per_sec"')

    shown = dict(tables.by_family(list(study.tables().values())))
    assert [f.name for f in shown] == ["convolutional", "recurrent"]
    assert [t.spec.metric.name for t in shown[family_of("lstm")]][:2] == ["images_per_sec", "tokens_per_sec"]
    assert "tokens_per_sec" not in [t.spec.metric.name for t in shown[family_of("lenet")]]
