"""One page of an Iceberg table as the portal's table viewers show it (execution results, logs,
a warehouse's table preview): the paging read from the URL, the page or a readable error, and
the URL the pager (and the browser's history) uses."""

from __future__ import annotations

from typing import Callable
from urllib.parse import urlencode

from flask import request

from app.iceberg_catalogs import ResultReadError
from app.iceberg_reader import Page

PAGE_SIZES = (25, 50, 100, 500)
DEFAULT_PAGE_SIZE = 50


def positive_int(value) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def parse_paging(args) -> tuple[int, int]:
    """(page, size): the page from 1 (a bad value means 1), the size one of PAGE_SIZES. Without
    a page, `row` names a row to keep in view: the page that holds it (a new page size keeps
    the first row the viewer saw on screen)."""
    size = positive_int(args.get("size"))
    size = size if size in PAGE_SIZES else DEFAULT_PAGE_SIZE
    page = positive_int(args.get("page"))
    if page is None and (row := positive_int(args.get("row"))):
        page = (row - 1) // size + 1
    return page or 1, size


def table_page_context(
    read: Callable[[int, int], Page],
    table: str,
    pager_url: str,
    params: dict[str, str] | None = None,
) -> dict:
    """`params`: query parameters every pager link and form keeps (e.g. the logs' filters)."""
    page_number, size = parse_paging(request.args)
    try:
        page, error = read(page_number, size), None
    except ResultReadError as failure:
        page, error = None, failure.args[0]
    context = {
        "page": page,
        "error": error,
        "table": table,
        "size": size,
        "page_sizes": PAGE_SIZES,
        "pager_url": pager_url,
        "pager_params": params or {},
    }
    context["page_link"] = lambda number, page_size: page_url(context, number, page_size)
    return context


def page_url(context: dict, page: int, size: int) -> str:
    """The pager's URL of page `page`, keeping the context's other parameters."""
    return f"{context['pager_url']}?{urlencode({'page': page, 'size': size, **context.get('pager_params', {})})}"


def canonical_page_url(context: dict) -> str | None:
    """?page=&size= (and the other parameters) of the page shown: what the address bar keeps
    (Back, shared links)."""
    page = context["page"]
    return page_url(context, page.page, page.size) if page else None
