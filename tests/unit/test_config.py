"""Unit tests for sparksync.config: topology validation, key paths, URLs and environment."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from pydantic import ValidationError

from sparksync.config import PUBLISHER_PRIORITY, Topology, expand_env
from sparksync.errors import ConfigurationError
from sparksync.topology import load_config, parse_topology


def valid_data() -> dict:
    return {
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "publisher": {"name": "HQ", "database": "sqlite:///data/hq.db", "snapshot_dir": "snaps"},
        "publications": [
            {
                "name": "Sales",
                "articles": [
                    {"table": "Customer"},
                    {"table": "SalesOrder", "column_tracking": True, "rowguid_column": "rowguid"},
                ],
            }
        ],
        "subscriptions": [
            {"name": "S1", "publication": "Sales", "database": "sqlite:///data/s1.db",
             "subscriber_type": "global", "priority": 75},
            {"name": "S2", "publication": "Sales", "database": "sqlite:///data/s2.db"},
        ],
    }


def problems_of(data: dict, base_dir: Path = Path("/tmp")) -> list[str]:
    with pytest.raises(ConfigurationError) as ei:
        parse_topology(data, base_dir)
    assert ei.value.problems, "a ConfigurationError from validation should list its problems"
    for p in ei.value.problems:  # every problem is also in the message
        assert p in ei.value.message
    return ei.value.problems


def one_problem(data: dict) -> str:
    problems = problems_of(data)
    assert len(problems) == 1, problems
    return problems[0]


# -- a valid topology ----------------------------------------------------------------------------

def test_valid_topology_parses(tmp_path):
    topo = parse_topology(valid_data(), tmp_path)
    assert isinstance(topo, Topology)
    assert topo.base_dir == tmp_path
    assert topo.publisher.name == "HQ"
    pub = topo.publication("Sales")
    assert pub.kind == "merge"
    assert pub.generation_leveling_threshold == 1000 and pub.retention == 14
    assert [a.table for a in pub.articles] == ["Customer", "SalesOrder"]
    assert pub.articles[0].column_tracking is False and pub.articles[0].rowguid_column is None
    assert pub.articles[1].column_tracking is True and pub.articles[1].rowguid_column == "rowguid"
    s1, s2 = topo.subscription("S1"), topo.subscription("S2")
    assert (s1.subscriber_type, s1.effective_priority, s1.subscriber_type_code) == ("global", 75.0, 1)
    assert (s2.subscriber_type, s2.effective_priority, s2.subscriber_type_code) == ("local", 0.0, 2)
    assert s2.pre_creation_cmd == "drop"
    assert [s.name for s in topo.subscriptions_of("Sales")] == ["S1", "S2"]
    assert topo.spark.conf == {"spark.sql.shuffle.partitions": "4"}


def test_minimal_topology_uses_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    topo = parse_topology({"publisher": {"name": "HQ", "database": "sqlite:///hq.db"}}, tmp_path)
    assert topo.publications == [] and topo.subscriptions == []
    assert topo.spark_master == "local[*]"
    assert topo.snapshots.location == str((tmp_path / "snapshots").resolve())


def test_article_table_name_property():
    data = valid_data()
    data["publications"][0]["articles"] = [{"table": "Sales.Customer"}]
    art = parse_topology(data, Path("/tmp")).publications[0].articles[0]
    assert (art.table_name.schema, art.table_name.name) == ("Sales", "Customer")


def test_lookups_of_unknown_names_raise_configuration_error():
    topo = parse_topology(valid_data(), Path("/tmp"))
    with pytest.raises(ConfigurationError, match="no publication named 'Nope'"):
        topo.publication("Nope")
    with pytest.raises(ConfigurationError, match=r"no subscription named 'Nope' \(known: S1, S2\)"):
        topo.subscription("Nope")


def test_topology_is_frozen():
    topo = parse_topology(valid_data(), Path("/tmp"))
    with pytest.raises(ValidationError, match="frozen"):
        topo.publisher.name = "Other"  # type: ignore[misc]


# -- problems with key paths ---------------------------------------------------------------------

def test_unknown_key_in_subscription_has_key_path():
    data = valid_data()
    data["subscriptions"][0]["foo"] = 1
    assert one_problem(data) == "subscriptions[0] (S1).foo: unknown key"


def test_unknown_top_level_key():
    data = valid_data()
    data["publisherz"] = {}
    assert one_problem(data) == "publisherz: unknown key"


def test_bad_article_table_has_key_path_with_publication_and_table():
    data = valid_data()
    data["publications"][0]["articles"][0]["table"] = 'Cus"x'
    p = one_problem(data)
    assert p.startswith('publications[0] (Sales).articles[0] (Cus"x).table: '), p
    assert "not allowed" in p


def test_three_part_article_table_is_rejected():
    data = valid_data()
    data["publications"][0]["articles"][1]["table"] = "db.Sales.Order"
    p = one_problem(data)
    assert p.startswith("publications[0] (Sales).articles[1] (db.Sales.Order).table: ")
    assert "schema.table" in p


def test_missing_required_keys():
    assert one_problem({}) == "publisher: required key is missing"
    data = valid_data()
    del data["subscriptions"][1]["database"]
    assert one_problem(data) == ('subscriptions[1] (S2): a subscription needs a database (or transport = "web": a '
                                 'device that syncs over HTTPS)')


def test_a_web_subscription_has_no_database_and_the_server_table_is_checked():
    data = valid_data()
    data["subscriptions"][1]["transport"] = "web"
    assert one_problem(data).startswith("subscriptions[1] (S2): a web subscription has no database here")
    del data["subscriptions"][1]["database"]
    data["server"] = {"listen": "nowhere"}
    assert one_problem(data).startswith("server.listen: ")
    data["server"] = {"listen": "0.0.0.0:8443", "tls_cert": "cert.pem"}
    assert "tls_cert and tls_key go together" in one_problem(data)
    data["server"] = {"listen": "0.0.0.0:8443", "max_request_mb": 0}
    assert one_problem(data).startswith("server.max_request_mb: ")


def test_several_field_problems_are_reported_at_once():
    data = valid_data()
    data["publisher"]["database"] = "mysql://x/y"
    data["publications"][0]["articles"][0]["rowguid_column"] = "row;guid"
    data["subscriptions"][1]["bar"] = True
    problems = problems_of(data)
    assert len(problems) == 3, problems
    assert any(p.startswith("publisher.database: must start with sqlite:/// or postgresql://") for p in problems)
    assert any(p.startswith("publications[0] (Sales).articles[0] (Customer).rowguid_column: ") for p in problems)
    assert "subscriptions[1] (S2).bar: unknown key" in problems


def test_source_is_named_in_the_message():
    with pytest.raises(ConfigurationError, match=r"^my\.toml: invalid configuration"):
        parse_topology({}, Path("/tmp"), source="my.toml")


@pytest.mark.parametrize("url", ["sqlite://relative.db", "sqlite:relative.db"])
def test_bad_sqlite_url(url):
    data = valid_data()
    data["publisher"]["database"] = url
    assert one_problem(data).startswith("publisher.database: a SQLite URL looks like sqlite:///")


def test_empty_articles_list_is_rejected():
    data = valid_data()
    data["publications"][0]["articles"] = []
    assert one_problem(data).startswith("publications[0] (Sales).articles: ")


def test_table_published_twice_case_insensitively():
    data = valid_data()
    data["publications"][0]["articles"].append({"table": "customer"})
    p = one_problem(data)
    assert p.startswith("publications[0] (Sales): ")
    assert "published twice" in p


# -- priorities ----------------------------------------------------------------------------------

@pytest.mark.parametrize("priority", [-1, -0.001, 100, 100.0, 150, float("nan")])
def test_global_priority_out_of_range(priority):
    data = valid_data()
    data["subscriptions"][0]["priority"] = priority
    p = one_problem(data)
    assert p.startswith("subscriptions[0] (S1)"), p
    assert "out of range" in p and "0 <= priority < 100" in p


@pytest.mark.parametrize("priority", [0, 0.0, 50.5, 99.99])
def test_global_priority_in_range(priority):
    data = valid_data()
    data["subscriptions"][0]["priority"] = priority
    topo = parse_topology(data, Path("/tmp"))
    assert topo.subscription("S1").effective_priority == float(priority)
    assert topo.subscription("S1").effective_priority < PUBLISHER_PRIORITY


def test_global_without_priority():
    data = valid_data()
    del data["subscriptions"][0]["priority"]
    p = one_problem(data)
    assert p.startswith("subscriptions[0] (S1)")
    assert "a global subscription needs a priority" in p


@pytest.mark.parametrize("priority", [5, 99, 0.5])
def test_local_with_priority_is_rejected(priority):
    data = valid_data()
    data["subscriptions"][1]["priority"] = priority
    p = one_problem(data)
    assert p.startswith("subscriptions[1] (S2)")
    assert "local subscription has no priority" in p


def test_unknown_subscriber_type():
    data = valid_data()
    data["subscriptions"][1]["subscriber_type"] = "anonymous"
    assert one_problem(data).startswith("subscriptions[1] (S2).subscriber_type: ")


# -- references and duplicates -------------------------------------------------------------------

def test_subscription_naming_unknown_publication():
    data = valid_data()
    data["subscriptions"][1]["publication"] = "Marketing"
    assert one_problem(data) == "subscriptions[1] (S2).publication: no publication named 'Marketing'"


def test_duplicate_publication_names():
    data = valid_data()
    data["publications"].append(copy.deepcopy(data["publications"][0]))
    assert "publication 'Sales' is declared twice" in one_problem(data)


def test_duplicate_subscription_names():
    data = valid_data()
    data["subscriptions"][1]["name"] = "S1"
    assert "subscription 'S1' is declared twice" in one_problem(data)


def test_subscription_to_the_publisher_database():
    data = valid_data()
    data["subscriptions"][1]["database"] = data["publisher"]["database"]
    assert one_problem(data) == "subscriptions[1] (S2).database: is the publisher's database"


def test_same_database_subscribing_twice_to_a_publication():
    data = valid_data()
    data["subscriptions"][1]["database"] = data["subscriptions"][0]["database"]
    p = one_problem(data)
    assert p.startswith("subscriptions[1] (S2).database: already subscribes to 'Sales' as 'S1'")


def test_each_reference_problem_is_a_separate_entry():
    data = valid_data()
    data["publications"].append(copy.deepcopy(data["publications"][0]))   # duplicate publication
    data["subscriptions"][1]["name"] = "S1"                               # duplicate subscription
    data["subscriptions"][0]["publication"] = "Marketing"                 # unknown publication
    assert len(problems_of(data)) == 3


def test_duplicate_name_problem_has_a_key_path():
    data = valid_data()
    data["subscriptions"][1]["name"] = "S1"
    assert one_problem(data).startswith("subscriptions[1] (S1)")


def test_field_and_reference_problems_are_reported_together():
    data = valid_data()
    data["subscriptions"][0]["foo"] = 1                 # field problem
    data["subscriptions"][1]["publication"] = "Nope"    # reference problem
    problems = problems_of(data)
    assert "subscriptions[0] (S1).foo: unknown key" in problems
    assert any("no publication named 'Nope'" in p for p in problems)


# -- kind ----------------------------------------------------------------------------------------

def test_unknown_kind_is_rejected():
    data = valid_data()
    data["publications"][0]["kind"] = "snapshot"
    assert one_problem(data).startswith("publications[0] (Sales).kind: ")


# -- URLs and environment ------------------------------------------------------------------------

def test_relative_sqlite_paths_resolve_against_base_dir(tmp_path):
    topo = parse_topology(valid_data(), tmp_path)
    assert topo.publisher_url == "sqlite:///" + str((tmp_path / "data" / "hq.db").resolve())
    assert topo.resolve_url("sqlite:///sub/s1.db") == "sqlite:///" + str((tmp_path / "sub" / "s1.db").resolve())
    assert topo.resolve_url("sqlite:///../up.db") == "sqlite:///" + str((tmp_path.parent / "up.db").resolve())


@pytest.mark.parametrize("url", ["sqlite:////var/data/abs.db", "sqlite:///:memory:", "sqlite:///",
                                 "postgresql://u:p@h:5432/db"])
def test_absolute_memory_and_server_urls_are_unchanged(tmp_path, url):
    assert parse_topology(valid_data(), tmp_path).resolve_url(url) == url


def test_snapshot_dir_is_relative_to_base_dir(tmp_path):
    assert parse_topology(valid_data(), tmp_path).snapshots.location == str((tmp_path / "snaps").resolve())


def test_env_vars_are_expanded_in_urls(tmp_path, monkeypatch):
    monkeypatch.setenv("PGUSER_T", "app")
    monkeypatch.setenv("PGPASS_T", "s3cr:t")
    data = valid_data()
    data["subscriptions"][1]["database"] = "postgresql://${PGUSER_T}:${PGPASS_T}@db.example:5432/sales"
    topo = parse_topology(data, tmp_path)
    s2 = topo.subscription("S2")
    assert s2.database == "postgresql://${PGUSER_T}:${PGPASS_T}@db.example:5432/sales"  # kept unexpanded
    assert topo.resolve_url(s2.database) == "postgresql://app:s3cr:t@db.example:5432/sales"


def test_env_vars_expand_before_sqlite_path_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("DB_DIR_T", "dbs")
    topo = parse_topology(valid_data(), tmp_path)
    assert topo.resolve_url("sqlite:///${DB_DIR_T}/x.db") == "sqlite:///" + str((tmp_path / "dbs" / "x.db").resolve())


def test_unset_env_var_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARKSYNC_TEST_UNSET_VAR", raising=False)
    topo = parse_topology(valid_data(), tmp_path)
    with pytest.raises((ValueError, ConfigurationError), match="SPARKSYNC_TEST_UNSET_VAR is not set"):
        topo.resolve_url("postgresql://u:${SPARKSYNC_TEST_UNSET_VAR}@h/db")


def test_unset_env_var_is_a_configuration_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARKSYNC_TEST_UNSET_VAR", raising=False)
    topo = parse_topology(valid_data(), tmp_path)
    with pytest.raises(ConfigurationError):
        topo.resolve_url("postgresql://u:${SPARKSYNC_TEST_UNSET_VAR}@h/db")


def test_expand_env_leaves_other_dollar_text_alone(monkeypatch):
    monkeypatch.setenv("A_T", "x")
    assert expand_env("$A_T ${A_T} $${A_T} ${not valid}") == "$A_T x $x ${not valid}"


def test_spark_master_env_overrides_config(monkeypatch):
    topo = parse_topology(valid_data(), Path("/tmp"))
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    assert topo.spark_master == "local[2]"
    monkeypatch.setenv("SPARK_MASTER", "spark://cluster:7077")
    assert topo.spark_master == "spark://cluster:7077"
    monkeypatch.setenv("SPARK_MASTER", "")
    assert topo.spark_master == "local[2]"


# -- load_config ---------------------------------------------------------------------------------

VALID_TOML = """
[publisher]
name = "HQ"
database = "sqlite:///hq.db"

[[publications]]
name = "Sales"
articles = [{ table = "Customer" }, { table = "SalesOrder", column_tracking = true }]

[[subscriptions]]
name = "S1"
publication = "Sales"
database = "sqlite:///s1.db"
subscriber_type = "global"
priority = 50
"""


def test_load_config_reads_toml_and_uses_its_folder_as_base(tmp_path):
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "sparksync.toml"
    path.write_text(VALID_TOML, encoding="utf-8")
    topo = load_config(path)
    assert topo.base_dir == (tmp_path / "conf").resolve()
    assert topo.publisher_url == "sqlite:///" + str((tmp_path / "conf" / "hq.db").resolve())
    assert topo.subscription("S1").effective_priority == 50.0
    assert topo.publication("Sales").articles[1].column_tracking is True


def test_load_config_accepts_str_path(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(VALID_TOML, encoding="utf-8")
    assert load_config(str(path)).publisher.name == "HQ"


def test_load_config_missing_file(tmp_path):
    path = tmp_path / "nope" / "sparksync.toml"
    with pytest.raises(ConfigurationError) as ei:
        load_config(path)
    assert "config file not found" in ei.value.message
    assert str(path) in ei.value.message


def test_load_config_directory_is_not_a_file(tmp_path):
    with pytest.raises(ConfigurationError, match="config file not found"):
        load_config(tmp_path)


def test_load_config_invalid_toml(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[publisher\nname = 'HQ'\n", encoding="utf-8")
    with pytest.raises(ConfigurationError) as ei:
        load_config(path)
    assert str(path) in ei.value.message
    assert "not valid TOML" in ei.value.message


def test_load_config_validation_errors_name_the_file(tmp_path):
    path = tmp_path / "sparksync.toml"
    path.write_text(VALID_TOML.replace("priority = 50", "priority = 100"), encoding="utf-8")
    with pytest.raises(ConfigurationError) as ei:
        load_config(path)
    assert ei.value.message.startswith(f"{path}: invalid configuration")
    assert len(ei.value.problems) == 1
    assert ei.value.problems[0].startswith("subscriptions[0] (S1)")
    assert "out of range" in ei.value.problems[0]


def test_spark_conf_takes_secrets_from_the_environment_and_refuses_an_unset_one_by_key(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_T", "s3cr3t")
    monkeypatch.delenv("SPARKSYNC_TEST_UNSET_VAR", raising=False)
    data = valid_data() | {"spark": {"master": "spark://m:7077", "conf": {
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": "${SECRET_T}", "spark.jars.ivy": "${env:HOME}/ivy"}}}
    conf = parse_topology(data, tmp_path).spark.application_conf()
    assert conf["spark.executorEnv.AWS_SECRET_ACCESS_KEY"] == "s3cr3t"
    assert conf["spark.jars.ivy"] == "${env:HOME}/ivy"             # Spark's own substitution is left to Spark
    data["spark"]["conf"]["spark.executorEnv.TOKEN"] = "${SPARKSYNC_TEST_UNSET_VAR}"
    with pytest.raises(ConfigurationError, match=r"spark\.conf\.spark\.executorEnv\.TOKEN: environment variable "
                                                 "SPARKSYNC_TEST_UNSET_VAR is not set"):
        parse_topology(data, tmp_path)


# -- device groups ---------------------------------------------------------------------------------

def _grouped(**group) -> dict:
    data = valid_data()
    data["device_groups"] = [{"name": "Tills", "publication": "Sales", **group}]
    return data


def test_a_device_group_parses_and_makes_its_devices_web_subscriptions(tmp_path):
    t = parse_topology(_grouped(sync_interval="1h", retention=30), tmp_path)
    g = t.device_group("Tills")
    s = g.device("Tills-0a1b2c3d", "north", None)
    assert (s.transport, s.publication, s.host_name, s.group, s.sync_interval_s) == ("web", "Sales", "north",
                                                                                     "Tills", 3600.0)
    extended = t.with_devices([s])
    assert extended.subscription("Tills-0a1b2c3d") is s and extended.enrolled == [s] and t.enrolled == []
    with pytest.raises(ConfigurationError, match="no subscription named 'Tills-0a1b2c3d'"):
        t.subscription("Tills-0a1b2c3d")
    with pytest.raises(ConfigurationError, match="no device group named 'Vans'"):
        t.device_group("Vans")


def test_device_group_mistakes_are_named():
    data = _grouped()
    data["device_groups"].append({"name": "Tills", "publication": "Sales"})
    assert "device group 'Tills' is declared twice" in one_problem(data)
    assert "'S1' is a subscription's name too" in one_problem(
        {**valid_data(), "device_groups": [{"name": "S1", "publication": "Sales"}]})
    assert "no publication named 'Nope'" in one_problem(_grouped(publication="Nope"))
    assert "made from a JWT's claims" in one_problem(_grouped(host_name="{store}"))
    trust = {"keys": "k.jwks", "issuer": "https://id", "audience": "a"}
    assert "a plain name" in one_problem(_grouped(host_name="{store.name}", jwt=trust))
    assert "algorithms" in one_problem(_grouped(jwt={**trust, "algorithms": ["HS256"]}))
    assert "algorithms" in one_problem(_grouped(jwt={**trust, "algorithms": ["none"]}))
    same = _grouped(jwt=trust)
    same["device_groups"].append({"name": "Vans", "publication": "Sales", "jwt": trust})
    assert "trusts the same issuer and audience" in one_problem(same)
    data = valid_data()
    data["subscriptions"][0]["group"] = "Tills"
    assert "group: a device enrolled into a device group is not configured" in one_problem(data)


def test_a_jwt_groups_partition_is_made_of_the_tokens_claims(tmp_path):
    trust = {"keys": "k.jwks", "issuer": "https://id", "audience": "a"}
    g = parse_topology(_grouped(host_name="{store}", login="{sub}", jwt=trust), tmp_path).device_group("Tills")
    assert g.partition_of({"store": "north", "sub": "alice", "n": 3}) == ("north", "alice")
    assert g.partition_of({"store": 12, "sub": "bob"}) == ("12", "bob")
    for claims in ({"sub": "alice"}, {"store": ["north"], "sub": "alice"}, {"store": True, "sub": "alice"}):
        with pytest.raises(KeyError):
            g.partition_of(claims)
