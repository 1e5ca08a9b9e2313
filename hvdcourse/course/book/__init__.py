"""Building the book: executing lessons (:mod:`~hvdcourse.course.book.book_build`, ``make book``),
the Sphinx extension of ``_config.yml`` (:mod:`~hvdcourse.course.book.sphinx_ext`) and the map of
lessons, exercises and their times (:mod:`~hvdcourse.course.book.course_map`). Part of the course
layer: may import :mod:`hvdcourse.examples` and :mod:`hvdcourse.runtime`.

Also:

* :mod:`~hvdcourse.course.book.prerun`: Execute the book's lessons several at a time, into myst-nb's
  cache, before the build reads them.
"""
