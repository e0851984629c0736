"""The accuracy matrix's pure parts (app/clients/accuracy.py): a cell's figures, the table,
the cells that miss."""

from __future__ import annotations

import pytest

from app.clients.accuracy import MODES, ROLES, Cell, cell, footer, matrix, misses


def test_the_docstring_example_mean_and_p95_of_the_per_second_rates() -> None:
    c = cell("confluent-kafka", "producer", "straight", [190e3, 200e3, 210e3, 240e3], 200e3)
    assert c.mean_ratio == pytest.approx(1.05)
    assert c.p95_ratio == pytest.approx(1.1775)


def test_a_cell_without_a_measured_second_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one measured second"):
        cell("aiokafka", "consumer", "broker", [], 200e3)


def test_the_matrix_has_a_row_per_library_and_role_and_a_column_per_mode() -> None:
    cells = [Cell("java", "producer", "straight", 0.987, 1.104),
             Cell("kafkajs", "consumer", "allocations", 0.9, 1.5)]
    lines = matrix(cells, ["java", "kafkajs"], ROLES, MODES).splitlines()
    assert lines[0].split()[:2] == ["LIBRARY", "ROLE"]
    assert [m.title in lines[0] for m in MODES] == [True] * len(MODES)
    rows = [line.split() for line in lines[1:]]
    assert [r[:2] for r in rows] == [["java", "producer"], ["java", "consumer"],
                                     ["kafkajs", "producer"], ["kafkajs", "consumer"]]
    assert rows[0][2:] == ["0.99x", "/", "1.10x", "-", "-", "-", "-"]
    assert rows[3][2:] == ["-", "-", "-", "0.90x", "/", "1.50x", "-"]


def test_the_brokers_running_the_plugin_are_a_mode_with_a_worker_and_no_gateway() -> None:
    plugin = next(m for m in MODES if m.plugin)
    assert (plugin.gateways, plugin.brokers, plugin.worker) == (0, 3, True)
    assert (plugin.scope, plugin.enforcement) == ("cluster", "allocations")
    straight = next(m for m in MODES if m.name == "straight")
    assert not straight.worker and not straight.plugin


def test_misses_are_the_means_off_by_more_than_five_percent_furthest_first() -> None:
    cells = [Cell("a", "producer", "straight", 1.05, 2.0),  # on the edge: holds
             Cell("b", "consumer", "cluster", 0.93, 1.0),
             Cell("c", "producer", "broker", 1.12, 1.3),
             Cell("d", "consumer", "broker", 0.97, 1.9)]
    assert misses(cells) == ["c producer broker: 1.12x (+12%)", "b consumer cluster: 0.93x (-7%)"]


def test_the_footer_states_the_window_the_warmup_and_the_quota() -> None:
    text = footer(200_000, 8, 20)
    assert "(1 s windows)" in text and "20 s measured after 8 s of warm-up" in text
    assert "200,000 B/s" in text
