package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

func topicHCL(env accEnv, tenant string, partitions, rf, retentionMs int) string {
	return env.adminProvider() + fmt.Sprintf(`
resource "meridian_topic" "t" {
  tenant             = %q
  name               = "orders"
  partitions         = %d
  replication_factor = %d
  retention_ms       = %d
  durability         = "interval"
}
`, tenant, partitions, rf, retentionMs)
}

// topicHas checks the API's view of the topic: ready, with these values.
func topicHas(t *testing.T, env accEnv, fullName string, partitions, rf, retentionMs int64) resource.TestCheckFunc {
	return func(*terraform.State) error {
		var topic topicJSON
		if err := env.apiGet(t, "topics/"+escape(fullName), nil, &topic); err != nil {
			return err
		}
		if topic.Status != "ready" || topic.Partitions != partitions || topic.ReplicationFactor != rf || topic.RetentionMs != retentionMs {
			return fmt.Errorf("API has %s: status %s, %d partitions, RF %d, retention %d; want ready, %d, %d, %d",
				fullName, topic.Status, topic.Partitions, topic.ReplicationFactor, topic.RetentionMs, partitions, rf, retentionMs)
		}
		return nil
	}
}

// TestAccTopic: create, update in place (retention, more partitions), drift from a
// change made through the API, recreation after a deletion made through the API,
// import, an API refusal shown on the attribute's line, and destroy.
func TestAccTopic(t *testing.T) {
	env := testAccEnv(t)
	tenant := env.testTenant(t)
	fullName := tenant + ".orders"
	admin := env.admin(t)
	ctx := context.Background()
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			return env.expectGone(t, "topics/"+escape(fullName), nil)
		},
		Steps: []resource.TestStep{
			{
				Config: topicHCL(env, tenant, 2, 3, 3600000),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_topic.t", "id", fullName),
					resource.TestCheckResourceAttr("meridian_topic.t", "full_name", fullName),
					resource.TestCheckResourceAttr("meridian_topic.t", "region", env.region),
					resource.TestCheckResourceAttr("meridian_topic.t", "status", "ready"),
					resource.TestCheckResourceAttr("meridian_topic.t", "durability", "interval"),
					topicHas(t, env, fullName, 2, 3, 3600000),
				),
			},
			{
				Config: topicHCL(env, tenant, 3, 3, 7200000),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_topic.t", plancheck.ResourceActionUpdate),
				}},
				Check: topicHas(t, env, fullName, 3, 3, 7200000),
			},
			{
				// Drift: retention changed through the API; the plan puts it back in place.
				PreConfig: func() {
					if err := admin.Patch(ctx, "topics/"+escape(fullName), nil, map[string]any{"retention_ms": 60000}, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: topicHCL(env, tenant, 3, 3, 7200000),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_topic.t", plancheck.ResourceActionUpdate),
				}},
				Check: topicHas(t, env, fullName, 3, 3, 7200000),
			},
			{
				// Deleted through the API: the plan creates it again.
				PreConfig: func() {
					if err := admin.Delete(ctx, "topics/"+escape(fullName), nil); err != nil {
						t.Fatal(err)
					}
					if err := waitGone(ctx, admin, "topics/"+escape(fullName), nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: topicHCL(env, tenant, 3, 3, 7200000),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_topic.t", plancheck.ResourceActionCreate),
				}},
				Check: topicHas(t, env, fullName, 3, 3, 7200000),
			},
			{
				ResourceName:      "meridian_topic.t",
				ImportState:       true,
				ImportStateId:     fullName,
				ImportStateVerify: true,
			},
			{
				// The API's refusal points at the attribute's line in the configuration.
				Config:      topicHCL(env, tenant, 3, 3, -5),
				ExpectError: regexp.MustCompile(`(?s)retention_ms\s+=\s+-5.*retention_ms:`),
			},
		},
	})
}

// TestAccTopicReplacement: what the API cannot change in place plans a replacement:
// the replication factor, and fewer partitions.
func TestAccTopicReplacement(t *testing.T) {
	env := testAccEnv(t)
	tenant := env.testTenant(t)
	fullName := tenant + ".orders"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			return env.expectGone(t, "topics/"+escape(fullName), nil)
		},
		Steps: []resource.TestStep{
			{
				Config: topicHCL(env, tenant, 3, 3, 7200000),
				Check:  topicHas(t, env, fullName, 3, 3, 7200000),
			},
			{
				// The replication factor cannot change in place: a replacement.
				Config: topicHCL(env, tenant, 3, 2, 7200000),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_topic.t", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: topicHas(t, env, fullName, 3, 2, 7200000),
			},
			{
				// Partitions only grow in place: fewer is a replacement.
				Config: topicHCL(env, tenant, 1, 2, 7200000),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_topic.t", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: topicHas(t, env, fullName, 1, 2, 7200000),
			},
		},
	})
}
