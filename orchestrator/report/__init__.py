"""From the store to what reviewers read: the site, its model, the exports, history and ledger."""
