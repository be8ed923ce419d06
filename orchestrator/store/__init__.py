"""The results database: engine and sharing rules, schema and migrations, every read and write."""
