"""The README's run command: the demo starts brokers, moves records through them, stops."""

from dataplane import demo


def test_demo_tour_runs_and_stops_its_brokers(tmp_path, capsys):
    assert demo.main(["--exit", "--records", "300", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "group demo.billing consumed 300 records" in out
    assert out.count(", lag 0") == 6, out
    assert "brokers stopped" in out
    hosted = sorted(p.name for p in tmp_path.glob("broker-*/demo.orders-*"))
    assert hosted == sorted(f"demo.orders-{p}" for p in range(6)), hosted
