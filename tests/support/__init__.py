"""What the tests share; test modules import from here (and use the fixtures of tests/conftest.py),
never from one another (tests/test_layout.py checks it).

- ``databases``: the one factory of throw-away databases (SQLite files, PostgreSQL databases dropped
  with their replication slots), for one test (the ``dbs`` fixture) or a module (``databases(...)``).
- ``failpoints``: failpoints armed by a test (the ``failpoints`` fixture).
- ``config``: configuration data written as a sparksync.toml; ``cli``: the CLI run in-process.
- ``clients``: SQL through sqlite3 / psql, as another application runs it.
- Topology builders: ``cluster`` (a merge publication of any tables, any dialect per replica),
  ``merge_topology`` (the conflict matrix: one table per resolver, four subscribers), ``filtered``
  (the filtered publication of seed 002 and its partitions), ``demo_topology`` (the demo database
  published), ``transactional`` (a Vendor publication with distributor and subscribers),
  ``publishing`` (a publication made without Spark, for the contract tests), ``all_types`` (a table
  of every logical type).
- ``clock`` (a fake clock for merge metadata), ``resolvers`` (a user resolver the merge topology
  names), ``ops_worker`` (the process ``test_operations_randomized`` kills:
  ``python -m tests.support.ops_worker``).
"""
