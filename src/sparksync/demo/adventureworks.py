"""A small, deterministic AdventureWorks-like database for demos and tests.

Six tables (customers, products, sales orders with their lines, vendors and employees), with
foreign keys and a schema per business area where the database has schemas. The same seed
always produces the same rows, on SQLite and on PostgreSQL alike.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

from sparksync.dialects.model import Column, ForeignKey, TableInfo
from sparksync.dialects.replica import Replica
from sparksync.names import TableName
from sparksync.types import Kind, SqlType, decimal_type

_INT, _SMALL = SqlType(Kind.INTEGER), SqlType(Kind.SMALLINT)
_TS, _DATE, _BOOL = SqlType(Kind.TIMESTAMP), SqlType(Kind.DATE), SqlType(Kind.BOOLEAN)
_MONEY = decimal_type(19, 4)
_CENT = Decimal("0.0001")

_FIRST = ["Ken", "Terri", "Roberto", "Rob", "Gail", "Jossef", "Dylan", "Diane", "Gigi", "Michael", "Ovidiu",
          "Thierry", "Janice", "Sharon", "David", "Kevin", "John", "Mary", "Wanida", "Jill", "Paula", "Ruth"]
_LAST = ["Sanchez", "Duffy", "Tamburello", "Walters", "Erickson", "Goldberg", "Miller", "Margheim", "Matthew",
         "Raheem", "Cracium", "DHers", "Galvin", "Salavaria", "Bradley", "Brown", "Wood", "Dempsey", "Benshoof"]
_TERRITORIES = ["Northwest", "Northeast", "Central", "Southwest", "Southeast", "Canada", "France", "Germany",
                "Australia", "United Kingdom"]
_LINES = {"M": "Mountain", "R": "Road", "T": "Touring", "S": "Standard"}
_ITEMS = ["Frame", "Bike", "Handlebars", "Seat", "Pedal", "Wheel", "Tire", "Jersey", "Helmet", "Fork", "Crankset"]
_COLORS = ["Black", "Red", "Silver", "Yellow", "Blue"]
_VENDOR_A = ["Advanced", "Australia", "Bicycle", "Compete", "Electronic", "Integrated", "Premier", "Superior",
             "Trey", "Vision", "Wide World", "Green Lake"]
_VENDOR_B = ["Bike Works", "Cycles", "Sport Supply", "Components", "Distributors", "Bike Company", "Parts Inc."]
_JOBS = ["Production Technician", "Sales Representative", "Buyer", "Design Engineer", "Marketing Specialist",
         "Accountant", "Purchasing Assistant", "Shipping Clerk", "Tool Designer", "Production Supervisor"]
_START = dt.datetime(2023, 1, 1, 8, 0, 0)


def _text(length: int | None = None) -> SqlType:
    return SqlType(Kind.TEXT, length=length)


def _table(schema: str | None, name: str, cols: list[tuple[str, SqlType, bool]],
           fks: tuple[ForeignKey, ...] = ()) -> TableInfo:
    columns = tuple(Column(n, t, nullable) for n, t, nullable in cols)
    return TableInfo(TableName(schema, name), columns, (columns[0].name,), fks)


def demo_tables(supports_schemas: bool) -> list[TableInfo]:
    """The six demo tables, parents before children."""
    purchasing = "Purchasing" if supports_schemas else None
    hr = "HumanResources" if supports_schemas else None
    customer, product = TableName(None, "Customer"), TableName(None, "Product")
    header = TableName(None, "SalesOrderHeader")
    modified = ("ModifiedDate", _TS, False)
    return [
        _table(None, "Customer", [("CustomerID", _INT, False), ("FirstName", _text(50), False),
                                  ("LastName", _text(50), False), ("EmailAddress", _text(100), True),
                                  ("Territory", _text(), True), modified]),
        _table(None, "Product", [("ProductID", _INT, False), ("Name", _text(50), False),
                                 ("ProductNumber", _text(25), False), ("ProductLine", _text(), True),
                                 ("ListPrice", _MONEY, False), modified]),
        _table(None, "SalesOrderHeader",
               [("SalesOrderID", _INT, False), ("CustomerID", _INT, False), ("OrderDate", _TS, False),
                ("Status", _SMALL, False), ("SubTotal", _MONEY, False), modified],
               (ForeignKey(("CustomerID",), customer, ("CustomerID",)),)),
        _table(None, "SalesOrderDetail",
               [("SalesOrderDetailID", _INT, False), ("SalesOrderID", _INT, False), ("ProductID", _INT, False),
                ("OrderQty", _SMALL, False), ("UnitPrice", _MONEY, False), modified],
               (ForeignKey(("SalesOrderID",), header, ("SalesOrderID",)),
                ForeignKey(("ProductID",), product, ("ProductID",)))),
        _table(purchasing, "Vendor", [("BusinessEntityID", _INT, False), ("AccountNumber", _text(15), False),
                                      ("Name", _text(50), False), ("CreditRating", _SMALL, False),
                                      ("ActiveFlag", _BOOL, False), modified]),
        _table(hr, "Employee", [("BusinessEntityID", _INT, False), ("LoginID", _text(256), False),
                                ("JobTitle", _text(50), False), ("HireDate", _DATE, False),
                                ("Territory", _text(), True), modified]),
    ]


def article_names(supports_schemas: bool) -> list[str]:
    """The demo tables as configuration strings (``Customer``, ..., ``Purchasing.Vendor``)."""
    return [str(t.name) for t in demo_tables(supports_schemas)]


def _money(rng: random.Random, low: float, high: float) -> Decimal:
    return Decimal(str(round(rng.uniform(low, high), 2))).quantize(_CENT)


def _when(rng: random.Random, days: int = 540) -> dt.datetime:
    return _START + dt.timedelta(days=rng.randrange(days), seconds=rng.randrange(10 * 3600))


def _rows(rng: random.Random, customers: int, products: int, orders: int, vendors: int,
          employees: int) -> list[list[tuple[Any, ...]]]:
    cust = []
    for i in range(1, customers + 1):
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        cust.append((i, first, last, f"{first.lower()}{i - 1}@adventure-works.com", rng.choice(_TERRITORIES),
                     _when(rng)))
    prod, prices = [], {}
    for i in range(1, products + 1):
        line, item, color = rng.choice(sorted(_LINES)), rng.choice(_ITEMS), rng.choice(_COLORS)
        size = rng.choice([38, 42, 44, 48, 52, 58, 62])
        prices[i] = _money(rng, 2.29, 3578.27)
        prod.append((i, f"{_LINES[line]} {item} {i}, {color}", f"{item[:2].upper()}-{line}{i:03d}-{size}",
                     line, prices[i], _when(rng)))
    headers: list[tuple] = []
    details: list[tuple] = []
    for o in range(1, orders + 1):
        order_date = _when(rng)
        subtotal = Decimal(0).quantize(_CENT)
        for pid in rng.sample(range(1, products + 1), min(rng.randint(1, 4), products)):
            qty = rng.randint(1, 12)
            subtotal += (prices[pid] * qty).quantize(_CENT)
            details.append((len(details) + 1, o, pid, qty, prices[pid], order_date))
        headers.append((o, rng.randint(1, customers), order_date, rng.choice([1, 2, 5, 5, 5]), subtotal,
                        order_date + dt.timedelta(days=rng.randint(0, 7))))
    vend = []
    for i in range(1, vendors + 1):
        name = f"{_VENDOR_A[(i - 1) % len(_VENDOR_A)]} {rng.choice(_VENDOR_B)}"
        account = name.replace(" ", "").upper()[:8] + f"{i:04d}"
        vend.append((1000 + i, account, name, rng.choice([1, 1, 1, 2, 3, 4, 5]), rng.random() > 0.1, _when(rng)))
    emp = []
    for i in range(1, employees + 1):
        hired = dt.date(2008, 1, 1) + dt.timedelta(days=rng.randrange(5000))
        emp.append((i, f"adventure-works\\{rng.choice(_FIRST).lower()}{i - 1}", rng.choice(_JOBS), hired,
                    rng.choice(_TERRITORIES) if rng.random() > 0.3 else None, _when(rng)))
    return [cust, prod, headers, details, vend, emp]


def create_demo_database(replica: Replica, *, seed: int = 7, customers: int = 60, products: int = 25,
                         orders: int = 120, vendors: int = 12, employees: int = 15) -> dict[str, int]:
    """Create the demo tables in ``replica`` and fill them; returns {table name: rows loaded}."""
    if orders and (customers < 1 or products < 1):
        raise ValueError("orders need at least one customer and one product")
    dialect = replica.dialect
    tables = demo_tables(dialect.capabilities.supports_schemas)
    data = _rows(random.Random(seed), customers, products, orders, vendors, employees)
    for table in tables:
        for stmt in dialect.render_create_table(table, rowguid=None):
            replica.execute(stmt)
    counts: dict[str, int] = {}
    with replica.transaction():
        for table, rows in zip(tables, data):
            counts[str(table.name)] = dialect.bulk_load(
                replica, table.name, table.column_names, [c.type for c in table.columns], rows)
    return counts
