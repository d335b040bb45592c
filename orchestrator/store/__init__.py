"""The results database: its tables, migrations, records, the journal beside it and the run lock."""
