"""Writes the telemetry files of `tests/tests/telemetry.rs::string_columns_stored_as_dictionaries_read_as_strings`:
one recording written three ways by the tools operators use, the names as plain strings, as a
pandas `category` and as a pyarrow `dictionary(int32, large_string)`; and for
`an_extra_column_of_a_type_polars_cannot_convert_is_ignored`, the plain one with an extra
pyarrow `list_view` column.

    python3 -m venv venv && venv/bin/pip install pandas pyarrow
    venv/bin/python tests/data/dictionary_names.py tests/data

Made with pandas 3.0.1 and pyarrow 26.0.1 (`names-list-view.parquet`: pandas 3.1.1, pyarrow
26.0.1).
"""

import sys

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

out = sys.argv[1]
interval = 100_000
rows = []
for t in range(1, 41):
    for switch, port, queue in [("leaf0", "eth1", 3), ("leaf0", "eth2", 3), ("spine1", "eth4", 4)]:
        depth = (t * 7919 + queue * 31) % 200_000
        tx = (t * 104_729) % 1_000_000
        rows.append(dict(
            ts_ns=t * interval, switch=switch, port=port, queue=queue, link_bps=100_000_000_000,
            queue_bytes=depth, queue_bytes_avg=depth * 0.75, queue_bytes_max=depth + 1_000,
            tx_bytes=tx, tx_pkts=tx // 1_000, ecn_marked_pkts=(tx // 1_000) // 3, pfc_pause_rx=0,
            pfc_pause_tx=t % 2, paused_ns=0, drops=0, kmin_bytes=20_000, kmax_bytes=200_000, pmax=0.2,
            span_ns=interval,
        ))
frame = pd.DataFrame(rows)
frame.to_parquet(f"{out}/names-plain.parquet", index=False)
category = frame.astype({"switch": "category", "port": "category"})
category.to_parquet(f"{out}/names-category.parquet", index=False)
table = pa.Table.from_pandas(frame, preserve_index=False)
for name in ["switch", "port"]:
    i = table.schema.get_field_index(name)
    column = table.column(name).cast(pa.large_string()).dictionary_encode()
    column = column.cast(pa.dictionary(pa.int32(), pa.large_string()))
    table = table.set_column(i, name, column)
pq.write_table(table, f"{out}/names-dictionary.parquet")
extra = pa.Table.from_pandas(frame, preserve_index=False)
extra = extra.append_column("notes", pa.array([[1, 2]] * len(frame), pa.list_view(pa.int32())))
pq.write_table(extra, f"{out}/names-list-view.parquet")
