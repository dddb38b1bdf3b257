// csrc/core/src/planner.cpp: dependency closure, phase-aware stable topological order, conflicts.
#include "turbo_physai/planner.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>

namespace turbo_physai {
namespace {

using Index = std::unordered_map<std::string, std::size_t>;

Index index_catalog(const std::vector<GroupNode> &catalog) {
    Index index;
    for (std::size_t i = 0; i < catalog.size(); ++i) {
        const auto &id = catalog[i].id;
        if (id.empty())
            throw PlanError("group at position " + std::to_string(i) + " has an empty ID");
        if (!index.emplace(id, i).second)
            throw PlanError("group '" + id + "' is declared twice");
    }
    return index;
}

std::size_t lookup(const Index &index, const std::string &id, const std::string &needed_by) {
    auto it = index.find(id);
    if (it == index.end()) {
        if (needed_by.empty())
            throw PlanError("unknown group '" + id + "'");
        throw PlanError("group '" + needed_by + "' depends_on unknown group '" + id + "'");
    }
    return it->second;
}

// Depth-first search over the closure; returns the first cycle found as "a -> b -> a".
std::string find_cycle(const std::vector<GroupNode> &catalog, const Index &index,
                       const std::vector<std::size_t> &nodes) {
    enum class Mark { none, active, done };
    std::vector<Mark> mark(catalog.size(), Mark::none);
    std::vector<std::size_t> stack;
    std::string cycle;
    auto visit = [&](auto &&self, std::size_t node) -> bool {
        mark[node] = Mark::active;
        stack.push_back(node);
        for (const auto &dep : catalog[node].depends_on) {
            std::size_t next = index.at(dep);
            if (mark[next] == Mark::active) {
                auto start = std::find(stack.begin(), stack.end(), next);
                for (auto it = start; it != stack.end(); ++it)
                    cycle += catalog[*it].id + " -> ";
                cycle += catalog[next].id;
                return true;
            }
            if (mark[next] == Mark::none && self(self, next))
                return true;
        }
        stack.pop_back();
        mark[node] = Mark::done;
        return false;
    };
    for (std::size_t node : nodes)
        if (mark[node] == Mark::none && visit(visit, node))
            return cycle;
    return {};
}

void check_phase(const GroupNode &group, const GroupNode &dependency) {
    if (group.import_compat && !dependency.import_compat)
        throw PlanError("import-compatibility group '" + group.id +
                        "' may depend only on import-compatibility groups, not on '" +
                        dependency.id + "'");
}

}  // namespace

void validate_catalog(const std::vector<GroupNode> &catalog) {
    Index index = index_catalog(catalog);
    for (const auto &group : catalog) {
        for (const auto &dep : group.depends_on)
            check_phase(group, catalog[lookup(index, dep, group.id)]);
    }
}

Plan plan_groups(const std::vector<GroupNode> &catalog, const std::vector<std::string> &requested) {
    // Only the closure is validated: an unrelated broken group elsewhere must not block this plan.
    Index index = index_catalog(catalog);

    // Closure, remembering which groups were asked for.
    std::vector<bool> in_closure(catalog.size(), false), asked(catalog.size(), false);
    std::vector<std::size_t> pending;
    for (const auto &id : requested) {
        std::size_t i = lookup(index, id, "");
        asked[i] = true;
        if (!in_closure[i]) {
            in_closure[i] = true;
            pending.push_back(i);
        }
    }
    std::vector<std::size_t> closure;
    while (!pending.empty()) {
        std::size_t node = pending.back();
        pending.pop_back();
        closure.push_back(node);
        for (const auto &dep : catalog[node].depends_on) {
            std::size_t next = lookup(index, dep, catalog[node].id);
            check_phase(catalog[node], catalog[next]);
            if (!in_closure[next]) {
                in_closure[next] = true;
                pending.push_back(next);
            }
        }
    }
    std::sort(closure.begin(), closure.end());
    std::string cycle = find_cycle(catalog, index, closure);
    if (!cycle.empty())
        throw PlanError("dependency cycle: " + cycle);

    // Kahn's algorithm keyed by (phase, declaration index): stable and import-compat first.
    std::vector<std::size_t> unmet(catalog.size(), 0);
    std::vector<std::vector<std::size_t>> dependents(catalog.size());
    for (std::size_t node : closure) {
        std::set<std::size_t> deps;
        for (const auto &dep : catalog[node].depends_on)
            deps.insert(index.at(dep));
        unmet[node] = deps.size();
        for (std::size_t dep : deps)
            dependents[dep].push_back(node);
    }
    using Key = std::pair<int, std::size_t>;
    std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ready;
    auto phase = [&](std::size_t node) { return catalog[node].import_compat ? 0 : 1; };
    for (std::size_t node : closure)
        if (unmet[node] == 0)
            ready.emplace(phase(node), node);

    Plan plan;
    std::map<std::string, std::string> writer;
    while (!ready.empty()) {
        std::size_t node = ready.top().second;
        ready.pop();
        const auto &group = catalog[node];
        plan.order.push_back(group.id);
        if (!asked[node])
            plan.added.push_back(group.id);
        std::set<std::string> own;  // a group may name the same path twice; that is no conflict
        for (const auto &path : group.writes) {
            if (!own.insert(path).second)
                continue;
            auto [it, fresh] = writer.emplace(path, group.id);
            if (!fresh)
                plan.conflicts.push_back({path, it->second, group.id});
        }
        for (std::size_t next : dependents[node])
            if (--unmet[next] == 0)
                ready.emplace(phase(next), next);
    }
    return plan;
}

}  // namespace turbo_physai
