"""What a dialect author uses: the hook contract (:mod:`.hookspecs`), its data types and
errors, and the helpers a SQL dialect builds on (``sql``, ``sqlbase``, ``apply``, ``arrow``,
``tableformat``). The names a plugin needs are re-exported by :mod:`sdk` itself."""
