"""The app's view model, free of widgets: a loaded job with what its views draw (the lanes' row
tables, the overview's activity, a scenario's predicted overlay). It sits below both the timeline
widgets (``app/timeline``) and the what-if workbench (``app/whatif``), which import it; it imports
no other app part but ``app.settings`` (the cache configuration a load uses) and no Qt beyond that."""
