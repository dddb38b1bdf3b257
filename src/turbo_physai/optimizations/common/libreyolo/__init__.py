"""The libreyolo catalog's replacements: our implementations in ``libreyolo.kernels`` slots
(:mod:`.slots`) and on the MSDA call sites of its model families (:mod:`.families`)."""
