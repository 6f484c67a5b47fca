"""Merging a folder of inventory files into one document, keeping every value's file and line.

Lists concatenate, equal defaults agree, gateway logs and discovery groups concatenate; anything else defined
twice is a conflict that names both places.
"""

from __future__ import annotations

from lorafleet.inventory.fields import Checker, join
from lorafleet.inventory.yamlsource import LDict, LList, new_ldict, new_llist, where


def merge_documents(checker: Checker, docs: list[LDict]) -> LDict:
    if len(docs) == 1:
        return docs[0]
    out = new_ldict(docs[0].file, 1)
    for doc in docs:
        for key, value in doc.items():
            file, line = where(doc, key)
            if key not in out:
                if isinstance(value, LList):
                    out[key] = _copy_list(value)
                elif isinstance(value, LDict) and key != "fleet":
                    out[key] = _copy_dict(value)
                else:
                    out[key] = value
                out.key_lines[key], out.key_files[key] = line or 1, file or doc.file
                continue
            have = out[key]
            if isinstance(have, LList) and isinstance(value, LList):
                _extend(have, value)
            elif isinstance(have, LDict) and isinstance(value, LDict):
                _merge_mapping(checker, have, value, key)
            elif have != value:
                ofile, oline = where(out, key)
                checker.add(doc, key, key, f"conflicts with the value at {ofile}:{oline}")
    return out


def _merge_mapping(checker: Checker, have: LDict, value: LDict, section: str) -> None:
    for sub, sub_value in value.items():
        mine = have.get(sub)
        lists = (section, sub) in (("gateway", "logs"), ("discovery", "groups"))
        if lists and isinstance(mine, LList) and isinstance(sub_value, LList):
            _extend(mine, sub_value)
            continue
        if sub in have and not (section == "defaults" and mine == sub_value):
            ofile, oline = where(have, sub)
            checker.add(value, sub, join(section, sub), f"conflicts with the one defined at {ofile}:{oline}")
            continue
        have[sub] = sub_value
        have.key_lines[sub], have.key_files[sub] = where(value, sub)[1] or 1, value.file


def _extend(have: LList, value: LList) -> None:
    """Append a line-aware list, keeping each item's file and line."""
    have.extend(value)
    have.item_lines.extend(value.item_lines)
    have.item_files.extend(value.item_files)


def _copy_list(value: LList) -> LList:
    out = new_llist(value.file, value.line)
    _extend(out, value)
    return out


def _copy_dict(value: LDict) -> LDict:
    out = new_ldict(value.file, value.line)
    out.update(value)
    out.key_lines.update(value.key_lines)
    out.key_files.update({k: value.key_files.get(k, value.file) for k in value})
    return out
