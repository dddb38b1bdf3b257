// csrc/core/include/turbo_physai/planner.h: orders optimization groups and finds conflicts.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace turbo_physai {

/// One declared group as the planner sees it: identity, phase, edges and the paths it writes.
struct GroupNode {
    std::string id;
    bool import_compat = false;           ///< import-compatibility groups run in the first phase
    std::vector<std::string> depends_on;  ///< IDs this group cannot work without
    std::vector<std::string> writes;      ///< target paths (and aliases) the group installs into
};

/// Two selected groups that install into the same path; applying both would lose one of them.
struct Conflict {
    std::string path;
    std::string first;   ///< earlier group in plan order
    std::string second;  ///< later group in plan order
};

struct Plan {
    std::vector<std::string> order;       ///< requested groups and their dependency closure
    std::vector<std::string> added;       ///< groups that only the closure brought in
    std::vector<Conflict> conflicts;
};

/// Raised for structural errors: unknown groups, cycles, phase violations, duplicates.
class PlanError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Throws PlanError for duplicate or empty IDs, unknown dependencies and phase violations.
void validate_catalog(const std::vector<GroupNode> &catalog);

/// Dependency closure of `requested` over `catalog` (declaration order = vector order), ordered
/// import-compat first, then a stable topological order in which declaration order breaks ties.
/// A cycle raises PlanError naming the path, e.g. "a -> b -> a".
Plan plan_groups(const std::vector<GroupNode> &catalog, const std::vector<std::string> &requested);

}  // namespace turbo_physai
